package cmd

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// --version names the build: a module version, else the commit, else
// (devel); never a made-up "dev" that names nothing a fork could use.
func TestVersionFromBuildInfo(t *testing.T) {
	setting := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install retrygate@v1.2.3", debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"a VCS-stamped go build", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201203545-0123456789ab+dirty"}}, "v0.0.0-20261201203545-0123456789ab+dirty"},
		{"a commit, clean", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: setting("vcs", "git", "vcs.revision", "0123456789abcdef0123456789abcdef01234567", "vcs.modified", "false")}, "(devel) 0123456789ab"},
		{"a commit, changed", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: setting("vcs.revision", "0123456789abcdef0123456789abcdef01234567", "vcs.modified", "true")}, "(devel) 0123456789ab+dirty"},
		{"-buildvcs=false", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: setting("-buildvcs", "false")}, "(devel)"},
		{"no version at all", debug.BuildInfo{}, "(devel)"},
	} {
		assert.Equal(t, c.want, buildVersion(&c.bi), c.name)
	}
}

func TestVersionFlag(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"v1.4.0", "retrygate v1.4.0\n"}, // the Action's -ldflags -X retrygate/cmd.Version=<ref>
		{"", "retrygate " + version() + "\n"},
	} {
		saved := Version
		Version = c.set
		ios, _, out, _ := TestStreams()
		code := Run(&Factory{IO: ios, Now: time.Now, Getenv: func(string) string { return "" }, Ctx: context.Background()}, []string{"--version"})
		Version = saved
		assert.Equal(t, 0, code)
		assert.Equal(t, c.want, out.String())
		assert.NotEqual(t, "retrygate dev\n", out.String())
	}
}
