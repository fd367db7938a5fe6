package cmd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile/store"
)

// claimGrants reads job j's grants and attempts from a claim state file.
func claimGrants(path string) (ids []string, attempts int, err error) {
	books, err := store.ReadFileBooks(path)
	if err != nil {
		return nil, 0, err
	}
	rec, ok := books[store.ClaimKey("j")]
	if !ok {
		return nil, 0, nil
	}
	c, err := store.ReadClaim(rec.Data)
	if err != nil {
		return nil, 0, err
	}
	for _, h := range c.Held {
		ids = append(ids, h.ID)
	}
	return ids, c.Job.Attempts, nil
}

// TestClaimUnderCleanup runs 64 claimer processes (a stress test,
// RETRYGATE_STRESS=1) for one job with a cap of 5
// while a cleanup removes files under the state's directory. Removed
// files are moved aside, not deleted, so the test can count afterwards:
//   - removing anything but the state (a lock file, temp files) in a loop
//     changes nothing: exactly the cap is granted;
//   - removing the state's directory once, mid-run, costs at most one
//     more cap (claimers that held the removed file carry its jobs over);
//   - removing the state or its directory in a loop loses no grant to a
//     race: every grant printed is recorded in a state that was at the path.
func TestClaimUnderCleanup(t *testing.T) {
	stressTest(t)
	bin := retrygateBinary(t)
	const cap, claimers = 5, 64
	for _, mode := range []string{"stray files", "state dir once", "state file", "state dir"} {
		t.Run(mode, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, ".retrygate")
			state := filepath.Join(dir, "claims.json")
			trash := filepath.Join(root, "trash")
			require.NoError(t, os.MkdirAll(trash, 0o755))
			require.NoError(t, os.MkdirAll(dir, 0o755))

			stop := make(chan struct{})
			var moved atomic.Int64
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					switch mode {
					case "stray files": // everything but the state: a lock file, temp files
						ents, _ := os.ReadDir(dir)
						for _, e := range ents {
							if e.Name() != "claims.json" {
								_ = os.Remove(filepath.Join(dir, e.Name()))
							}
						}
					case "state file":
						if os.Rename(state, filepath.Join(trash, fmt.Sprintf("claims.%d.json", n))) == nil {
							moved.Add(1)
						}
					case "state dir":
						if os.Rename(dir, filepath.Join(trash, fmt.Sprintf("d%d", n))) == nil {
							moved.Add(1)
						}
					case "state dir once":
						if _, n, err := claimGrants(state); moved.Load() == 0 && err == nil && n >= 2 {
							if os.Rename(dir, filepath.Join(trash, "d")) == nil {
								moved.Add(1)
							}
						}
					}
					time.Sleep(200 * time.Microsecond)
				}
			}()

			var granted atomic.Int64
			var mu sync.Mutex
			var odd []string
			var run sync.WaitGroup
			for range claimers {
				run.Add(1)
				go func() {
					defer run.Done()
					c := exec.Command(bin, "claim", "--job", "j", "--deadline", "1h", "--max-attempts", fmt.Sprint(cap), "--state", state)
					c.Dir = root
					var out, errb bytes.Buffer
					c.Stdout, c.Stderr = &out, &errb
					err := c.Run()
					var ee *exec.ExitError
					switch {
					case err == nil:
						granted.Add(1)
					case errors.As(err, &ee) && ee.ExitCode() == 1 && strings.TrimSpace(errb.String()) == "refuse: attempt cap":
					default:
						mu.Lock()
						odd = append(odd, fmt.Sprintf("%v: %s", err, errb.String()))
						mu.Unlock()
					}
				}()
			}
			run.Wait()
			close(stop)
			wg.Wait()
			assert.Empty(t, odd, "every claimer either got an attempt or was refused by the cap")

			grants := map[string]bool{}
			var files []string
			_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
				if err == nil && info.Mode().IsRegular() && strings.HasSuffix(p, ".json") {
					files = append(files, p)
				}
				return nil
			})
			for _, p := range files {
				ids, _, err := claimGrants(p)
				require.NoError(t, err, p)
				for _, g := range ids {
					grants[g] = true
				}
			}
			t.Logf("%s: %d granted of %d, %d removals, %d grants recorded in %d files",
				mode, granted.Load(), claimers, moved.Load(), len(grants), len(files))
			assert.LessOrEqual(t, int(granted.Load()), len(grants), "a grant that no state records")
			switch mode {
			case "stray files":
				assert.EqualValues(t, cap, granted.Load())
			case "state dir once":
				assert.LessOrEqual(t, granted.Load(), int64(2*cap))
			}
		})
	}
}
