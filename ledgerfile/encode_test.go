package ledgerfile

import "testing"

// BenchmarkAppendRow is one rehearsed attempt's row, encoded.
func BenchmarkAppendRow(b *testing.B) {
	r := batchRow("r1-00042", 1)
	r.HasTTFB, r.HasSplit, r.HasSpent, r.PromptTokens, r.CompletionTokens = true, true, true, 20, 10
	r.TokensFrom, r.PromptSHA, r.JobEnd, r.HTTPStatus = FromUsage, "bd049bb2fd2e", JobSucceeded, 200
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRow(buf[:0], &r)
	}
}
