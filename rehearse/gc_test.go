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
