package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartupLinksNoMetricsClient: every retrygate command runs the init
// of every package the binary links, so the proxy's metrics must not
// bring a Prometheus client with them (client_golang with procfs,
// protobuf and expvar was about 2.7 ms of every start-up, runtime/metrics
// alone up to 0.8 ms; docs/dev/speed.md). The exposition is written by
// hand in rehearse/proxy/metrics.
func TestStartupLinksNoMetricsClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	for _, heavy := range []string{"github.com/prometheus/client_golang/prometheus", "github.com/prometheus/procfs",
		"google.golang.org/protobuf/proto", "expvar", "runtime/metrics"} {
		assert.NotContains(t, deps, heavy, "the retrygate binary links %s", heavy)
	}
}
