package proxy

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// SidecarProcs halves the Ps (at least one) unless GOMAXPROCS is set,
// and its restore gives Go's default back.
func TestSidecarProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	restore := SidecarProcs(func(string) string { return "" })
	assert.Equal(t, max(1, before/2), runtime.GOMAXPROCS(0))
	restore()
	assert.Equal(t, before, runtime.GOMAXPROCS(0))

	restore = SidecarProcs(func(k string) string {
		if k == "GOMAXPROCS" {
			return "7"
		}
		return ""
	})
	assert.Equal(t, before, runtime.GOMAXPROCS(0), "an explicit GOMAXPROCS is the user's")
	restore()
	assert.Equal(t, before, runtime.GOMAXPROCS(0))
}
