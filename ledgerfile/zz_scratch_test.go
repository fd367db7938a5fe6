package ledgerfile

import (
	"bufio"
	"bytes"
	"os"
	"testing"
)

func scratchLines(b *testing.B) [][]byte {
	f, _ := os.Open("/tmp/rf/rehearsal.log")
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() && len(lines) < 100_000 {
		if l := sc.Bytes(); len(l) > 0 && l[0] != '#' {
			lines = append(lines, bytes.Clone(l))
		}
	}
	return lines
}

func BenchmarkZCheckBytes(b *testing.B) {
	lines := scratchLines(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		checkBytes(lines[i%len(lines)])
	}
}

func BenchmarkZTokenize(b *testing.B) {
	lines := scratchLines(b)
	b.ResetTimer()
	n := 0
	for i := 0; b.Loop(); i++ {
		line := lines[i%len(lines)]
		for p := 0; p < len(line); {
			for p < len(line) && line[p] <= ' ' {
				p++
			}
			p = wordEnd(line, p)
			if p < len(line) && line[p] == '=' {
				p++
				p = wordEnd(line, p)
				n++
			}
		}
	}
	_ = n
}

func BenchmarkZTrim(b *testing.B) {
	lines := scratchLines(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		trimLine(lines[i%len(lines)])
	}
}

func BenchmarkZRowCopy(b *testing.B) {
	var r, s Row
	r.Job = "x"
	b.ResetTimer()
	for b.Loop() {
		s = r
		r = s
	}
}
