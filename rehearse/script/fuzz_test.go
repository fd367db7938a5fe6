package script

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

var fuzzErrRE = regexp.MustCompile(`^f\.yaml:[1-9][0-9]*: `)

// FuzzParse: no script makes the parser panic; every error names
// f.yaml:line; whatever parses has at least one call, and its plans are
// consistent and resolve without panicking.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/seats/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		// seed002-shape's 70 KB slow the fuzzer down for nothing: its first
		// lines hold every construct it uses.
		if len(data) > 8<<10 {
			data = data[:bytes.LastIndexByte(data[:8<<10], '\n')+1]
		}
		f.Add(data)
	}
	for _, name := range BuiltinNames() {
		data, _ := BuiltinSource(name)
		f.Add(data)
	}
	for _, tc := range parseErrorCases {
		f.Add([]byte(tc.src))
	}
	f.Add([]byte("steps:\n  - &a {wait: 1s, repeat: 3}\n  - *a\n  - {hang: true, reset_after: 2s}\nthen: last\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, "f.yaml")
		if err != nil {
			if s != nil {
				t.Fatal("a script and an error")
			}
			var e *Error
			if !errors.As(err, &e) || e.Line < 1 || !fuzzErrRE.MatchString(err.Error()) {
				t.Fatalf("error without f.yaml:line: %q", err)
			}
			return
		}
		if s.Len() < 1 || s.Steps() < 1 || s.Steps() > s.Len() {
			t.Fatalf("Len %d, Steps %d", s.Len(), s.Steps())
		}
		for _, n := range []int{-1, 0, 1, s.Len() - 1, s.Len(), 2*s.Len() + 1, math.MaxInt} {
			p := s.PlanFor(n)
			checkPlan(t, p)
			for _, lim := range [][3]time.Duration{{0, 0, 0}, {20 * time.Second, 5 * time.Second, 10 * time.Second}, {time.Second, 0, 0}} {
				o := seat.Resolve(p, lim[0], lim[1], lim[2])
				if o.Elapsed < 0 || o.CompletionTokens < 0 || o.CompletionTokens > p.CompletionTokens || o.Outcome == "" {
					t.Fatalf("plan %+v under %v: observation %+v", p, lim, o)
				}
				if o.HasTTFB && o.TTFB > o.Elapsed {
					t.Fatalf("plan %+v under %v: headers after the end: %+v", p, lim, o)
				}
			}
		}
	})
}

// checkPlan asserts what the parser promises about every plan.
func checkPlan(t *testing.T, p seat.Plan) {
	t.Helper()
	if p.ConnError {
		if p != (seat.Plan{ConnError: true}) {
			t.Fatalf("conn_error plan carries more: %+v", p)
		}
		return
	}
	bad := p.Wait < 0 || p.TTFB < 0 || p.TTFB > p.Wait || p.ResetAfter < 0 ||
		p.PromptTokens < 0 || p.CompletionTokens < 0 || p.RetryAfter < 0 ||
		(p.Status != 200 && (p.Status < 400 || p.Status > 599))
	if !p.Hang {
		bad = bad || p.Elapsed < p.Wait || p.ResetAfter > p.Elapsed || p.Elapsed > admit.MaxStep
	}
	if bad {
		t.Fatalf("inconsistent plan %+v", p)
	}
}

func BenchmarkPlanFor(b *testing.B) {
	for _, file := range []string{"seed002-shape.yaml", "bad-day.yaml"} {
		s, err := Load("../../testdata/seats/" + file)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(file, func(b *testing.B) { benchPlanFor(b, s) })
	}
	// 1000 steps that all repeat: the binary search over cumulative counts.
	src := []byte("steps:\n")
	for i := range 1000 {
		src = append(src, []byte("  - {wait: "+time.Duration(i+1).String()+", repeat: 7}\n")...)
	}
	s, err := Parse(src, "repeats.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("1000-steps-repeat-7", func(b *testing.B) { benchPlanFor(b, s) })
}

var planSink seat.Plan

func benchPlanFor(b *testing.B, s *Script) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		planSink = s.PlanFor(n)
		n += 7919 // a prime stride, so every step is visited
	}
}
