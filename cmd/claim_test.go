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

	"retrygate/ledgerfile/claims"
)

// TestClaimUnderCleanup runs 64 claimer processes for one job with a cap
// of 5 while a cleanup removes files under the state's directory in a
// loop. A removed state forgets its jobs (as --done does), so the test
// moves removed files aside instead of deleting them and then counts: no
// state ever records more than the cap, and every grant printed is
// recorded in some state that was at the path (none lost to a race).
func TestClaimUnderCleanup(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns 64 processes per case")
	}
	bin := retrygateBinary(t)
	const claimers, cap = 64, 5
	for _, mode := range []string{"stray files", "state file", "state dir"} {
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

			recorded := 0
			var files []string
			_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
				if err == nil && info.Mode().IsRegular() && strings.HasSuffix(p, ".json") {
					files = append(files, p)
				}
				return nil
			})
			for _, p := range files {
				s, err := claims.ReadFile(p)
				require.NoError(t, err, p)
				n := s.Jobs["j"].Attempts
				assert.LessOrEqual(t, n, cap, "%s records more attempts than the cap", p)
				recorded += n
			}
			t.Logf("%s: %d granted of %d, %d states moved aside, %d attempts recorded in %d files",
				mode, granted.Load(), claimers, moved.Load(), recorded, len(files))
			assert.LessOrEqual(t, int(granted.Load()), recorded, "a grant that no state records")
			if mode == "stray files" {
				assert.EqualValues(t, cap, granted.Load())
			}
		})
	}
}
