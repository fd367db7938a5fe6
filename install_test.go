package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// TestGoInstallFromAModuleProxy installs retrygate as the README says,
// `go install github.com/retrygate/retrygate@latest`, from a module proxy
// made of this checkout: the module path resolves, the module zip is
// valid (no nested module, no file the zip format refuses), go.mod has no
// replace (go install path@version refuses one), go.sum holds every
// dependency, and the installed binary runs the demo. No network: the
// proxy is a directory, and the dependencies come from the module cache's
// own download directory.
func TestGoInstallFromAModuleProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles retrygate from a module zip")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	modCache := goEnv(t, goBin, "GOMODCACHE")
	data, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.ParseLax("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := mf.Module.Mod.Path
	if readme, err := os.ReadFile("README.md"); err != nil || !strings.Contains(string(readme), "go install "+path+"@latest") {
		t.Errorf("README.md does not give the install line `go install %s@latest` (%v)", path, err)
	}

	// A version of its own per run: the module cache keeps what it
	// downloaded, and the same version with other bytes would not verify.
	// It is removed from the module cache when the test ends.
	at := time.Now().UTC()
	var rev [6]byte
	_, _ = rand.Read(rev[:])
	version := module.PseudoVersion("v0", "", at, hex.EncodeToString(rev[:]))
	mv := module.Version{Path: path, Version: version}
	t.Cleanup(func() { dropFromModCache(t, modCache, mv) })

	proxy := t.TempDir()
	dir := filepath.Join(proxy, filepath.FromSlash(path), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": at.Format(time.RFC3339)})
	files := map[string][]byte{
		filepath.Join(dir, "list"):          []byte(version + "\n"),
		filepath.Join(dir, version+".info"): info,
		filepath.Join(dir, version+".mod"):  data,
		filepath.Join(dir, "..", "@latest"): info,
	}
	for name, b := range files {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	z, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	if err := zip.CreateFromDir(z, mv, "."); err != nil {
		t.Fatalf("the module zip: %v", err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}

	bin, work := t.TempDir(), t.TempDir()
	install := exec.Command(goBin, "install", path+"@latest")
	install.Dir = work // outside any module, as a user's shell is
	install.Env = append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(modCache, "cache", "download")),
		// No checksum database offline: the module is not in it, and the
		// dependencies come from the module cache, verified when they
		// were first downloaded.
		"GOSUMDB=off",
		"GOFLAGS=-mod=mod",
		"GOTOOLCHAIN=local",
		"GOWORK=off",
		"GOBIN="+bin,
	)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install %s@latest: %v\n%s", path, err, out)
	}

	exe := filepath.Join(bin, "retrygate")
	out, err := exec.Command(exe, "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "retrygate "+version {
		t.Fatalf("retrygate --version: %v: %q, want %q", err, out, "retrygate "+version)
	}
	demo := exec.Command(exe, "rehearse")
	demo.Dir = work
	out, err = demo.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "built-in demo") {
		t.Fatalf("retrygate rehearse (the demo): %v\n%s", err, out)
	}
}

func goEnv(t *testing.T, goBin, key string) string {
	t.Helper()
	out, err := exec.Command(goBin, "env", key).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", key, err)
	}
	return strings.TrimSpace(string(out))
}

// dropFromModCache removes one version of a module from the module cache:
// its extracted tree (read-only, as the go command leaves it) and its
// downloaded files.
func dropFromModCache(t *testing.T, modCache string, mv module.Version) {
	esc, err := module.EscapePath(mv.Path)
	if err != nil {
		t.Error(err)
		return
	}
	tree := filepath.Join(modCache, filepath.FromSlash(esc)+"@"+mv.Version)
	_ = filepath.WalkDir(tree, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(tree); err != nil {
		t.Error(err)
	}
	dl, _ := filepath.Glob(filepath.Join(modCache, "cache", "download", filepath.FromSlash(esc), "@v", mv.Version+".*"))
	for _, f := range dl {
		if err := os.Remove(f); err != nil {
			t.Error(err)
		}
	}
}
