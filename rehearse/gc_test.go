package rehearse

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRealTimeGC: without GOGC the collector runs at RealGCPercent until
// restored; a GOGC the user set is left alone.
func TestRealTimeGC(t *testing.T) {
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)

	restore := RealTimeGC(func(string) string { return "" })
	assert.Equal(t, RealGCPercent, debug.SetGCPercent(RealGCPercent), "while real calls run")
	restore()
	assert.Equal(t, 150, debug.SetGCPercent(150), "restored")

	restore = RealTimeGC(func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	})
	assert.Equal(t, 150, debug.SetGCPercent(150), "GOGC set: left alone")
	restore()
	assert.Equal(t, 150, debug.SetGCPercent(150))
}

// TestGCPercent: the proxy's go_gc_gogc_percent is what RealTimeGC set
// while it holds, and GOGC as the runtime reads it otherwise.
func TestGCPercent(t *testing.T) {
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOGC" {
				return v
			}
			return ""
		}
	}
	restore := RealTimeGC(env(""))
	assert.Equal(t, RealGCPercent, GCPercent(env("")))
	restore()
	assert.Equal(t, 150, GCPercent(env("")), "restored: what it put back")
	gcSet.Store(0) // a process where RealTimeGC never ran
	assert.Equal(t, 100, GCPercent(env("")))
	assert.Equal(t, 50, GCPercent(env("50")))
	assert.Equal(t, -1, GCPercent(env("off")))
	assert.Equal(t, 100, GCPercent(env("lots")))
}
