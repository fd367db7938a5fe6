package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
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
//
// The version is the checkout's content (a pseudo-version dated
// 2000-01-01 whose revision is a hash of the module zip), so an unchanged
// tree installs from the module and build caches in seconds; the module
// cache keeps that one version of the test's, and a run with other
// content replaces it. One run at a time on a machine (a lock), since
// each may drop the others' version.
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

	lock := flock.New(filepath.Join(os.TempDir(), "retrygate-install-test.lock"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if ok, err := lock.TryLockContext(ctx, 100*time.Millisecond); !ok {
		t.Fatalf("another run of this test holds its lock: %v", err)
	}
	defer func() { _ = lock.Unlock() }()

	// The version is the content: a zip under a placeholder version is
	// hashed first.
	work := t.TempDir()
	content := filepath.Join(work, "content.zip")
	writeModuleZip(t, content, module.Version{Path: path, Version: "v0.0.0"})
	h, err := dirhash.HashZip(content, dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(h))
	at := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // marks the test's versions
	version := module.PseudoVersion("v0", "", at, hex.EncodeToString(sum[:6]))
	mv := module.Version{Path: path, Version: version}
	dropOtherTestVersions(t, modCache, mv, at)

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
	writeModuleZip(t, filepath.Join(dir, version+".zip"), mv)

	bin := t.TempDir()
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

// writeModuleZip writes the checkout as the module zip of mv, as the
// go command and a module proxy lay it out (no nested module, no .git).
// In a git checkout it holds the files git would commit (tracked, and new
// files not ignored: not the README's ./retrygate build or the demo's
// rehearsal.log); else every file under the directory.
func writeModuleZip(t *testing.T, name string, mv module.Version) {
	t.Helper()
	z, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		err = zip.CreateFromDir(z, mv, ".")
	} else {
		var files []zip.File
		nested := map[string]bool{} // directories that hold a module of their own
		paths := strings.Split(strings.TrimSuffix(string(listed), "\x00"), "\x00")
		for _, p := range paths {
			if d := filepath.Dir(p); filepath.Base(p) == "go.mod" && d != "." {
				nested[d] = true
			}
		}
	next:
		for _, p := range paths {
			for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
				if nested[d] {
					continue next
				}
			}
			if _, err := os.Lstat(p); err == nil { // not deleted in the working tree
				files = append(files, diskFile(p))
			}
		}
		err = zip.Create(z, mv, files)
	}
	if err != nil {
		t.Fatalf("the module zip: %v", err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
}

// diskFile is a file of the checkout, for zip.Create.
type diskFile string

func (f diskFile) Path() string                 { return filepath.ToSlash(string(f)) }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(string(f)) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(string(f)) }

// dropOtherTestVersions removes from the module cache every version of
// the module this test made (dated at) but keep: their extracted trees
// (read-only, as the go command leaves them) and their downloaded files.
func dropOtherTestVersions(t *testing.T, modCache string, keep module.Version, at time.Time) {
	esc, err := module.EscapePath(keep.Path)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "v0.0.0-" + at.Format("20060102150405") + "-"
	trees, _ := filepath.Glob(filepath.Join(modCache, filepath.FromSlash(esc)+"@"+prefix+"*"))
	for _, tree := range trees {
		if strings.HasSuffix(tree, "@"+keep.Version) {
			continue
		}
		_ = filepath.WalkDir(tree, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(tree); err != nil {
			t.Error(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(modCache, "cache", "download", filepath.FromSlash(esc), "@v", prefix+"*"))
	for _, f := range files {
		if !strings.HasPrefix(filepath.Base(f), keep.Version+".") {
			if err := os.Remove(f); err != nil {
				t.Error(err)
			}
		}
	}
}
