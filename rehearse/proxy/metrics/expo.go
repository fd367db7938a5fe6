// The families the proxy counts and their Prometheus text exposition
// (format 0.0.4), written here rather than by client_golang: its
// packages (with procfs, protobuf and expvar) cost every retrygate
// command about 2.7 ms of start-up, and these cost nothing until a proxy
// serves them. The text is byte for byte client_golang's
// (testdata/exposition.golden): families by name, series by their label
// values, labels by name with a histogram's le last.

package metrics

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

type familyKind uint8

const (
	counterKind familyKind = iota
	gaugeKind
	histogramKind
	summaryKind
)

var kindNames = [...]string{"counter", "gauge", "histogram", "summary"}

// family is one metric's series. Callers serialise (Metrics.mu).
type family struct {
	name, help string
	kind       familyKind
	labels     []string  // label names, in the order values are given
	order      []int     // label indexes by name: the order they are written in
	buckets    []float64 // a histogram's upper bounds (+Inf implied)
	series     map[string]*series
}

// series is one label set's value: a counter keeps its whole-number adds
// apart from the others, as client_golang does, so its sums are the same.
type series struct {
	values []string
	n      uint64    // a counter's whole-number adds; a histogram's count
	f      float64   // a counter's other adds; a gauge's value; a histogram's sum
	counts []uint64  // a histogram's observations per bucket, +Inf last
	quants []float64 // a summary's quantiles' values (summaryQuantiles)
}

func newFamily(kind familyKind, name, help string, buckets []float64, labels ...string) *family {
	f := &family{name: name, help: help, kind: kind, labels: labels, buckets: buckets, series: map[string]*series{}}
	f.order = make([]int, len(labels))
	for i := range f.order {
		f.order[i] = i
	}
	slices.SortFunc(f.order, func(a, b int) int { return strings.Compare(labels[a], labels[b]) })
	return f
}

// with is the series of label values vals, made on first use.
func (f *family) with(vals ...string) *series {
	key := strings.Join(vals, "\xff")
	s := f.series[key]
	if s == nil {
		s = &series{values: slices.Clone(vals)}
		if f.kind == histogramKind {
			s.counts = make([]uint64, len(f.buckets)+1)
		}
		f.series[key] = s
	}
	return s
}

// add adds v (≥ 0) to a counter.
func (s *series) add(v float64) {
	if u := uint64(v); float64(u) == v {
		s.n += u
		return
	}
	s.f += v
}

func (s *series) inc()             { s.n++ }
func (s *series) set(v float64)    { s.f = v }
func (s *series) counter() float64 { return float64(s.n) + s.f }

// observe counts v in a histogram: in the first bucket whose bound is at
// least v.
func (s *series) observe(buckets []float64, v float64) {
	i, _ := slices.BinarySearch(buckets, v)
	s.counts[i]++
	s.n++
	s.f += v
}

// write appends the family's exposition (nothing for a family without
// series).
func (f *family) write(b []byte) []byte {
	if len(f.series) == 0 {
		return b
	}
	b = append(b, "# HELP "...)
	b = append(b, f.name...)
	b = append(b, ' ')
	b = appendEscaped(b, f.help, false)
	b = append(b, "\n# TYPE "...)
	b = append(b, f.name...)
	b = append(b, ' ')
	b = append(b, kindNames[f.kind]...)
	b = append(b, '\n')
	all := make([]*series, 0, len(f.series))
	for _, s := range f.series {
		all = append(all, s)
	}
	slices.SortFunc(all, func(x, y *series) int {
		for _, i := range f.order {
			if c := strings.Compare(x.values[i], y.values[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	for _, s := range all {
		switch f.kind {
		case counterKind:
			b = f.sample(b, "", s, "", "", s.counter())
		case gaugeKind:
			b = f.sample(b, "", s, "", "", s.f)
		case histogramKind:
			var cum uint64
			for i, c := range s.counts {
				cum += c
				le := math.Inf(1)
				if i < len(f.buckets) {
					le = f.buckets[i]
				}
				b = f.sampleUint(b, "_bucket", s, "le", string(appendFloat(nil, le)), cum)
			}
			b = f.sample(b, "_sum", s, "", "", s.f)
			b = f.sampleUint(b, "_count", s, "", "", s.n)
		case summaryKind:
			for i, q := range summaryQuantiles {
				b = f.sample(b, "", s, "quantile", string(appendFloat(nil, q)), s.quants[i])
			}
			b = f.sample(b, "_sum", s, "", "", s.f)
			b = f.sampleUint(b, "_count", s, "", "", s.n)
		}
	}
	return b
}

func (f *family) sample(b []byte, suffix string, s *series, extra, extraValue string, v float64) []byte {
	b = f.labelled(b, suffix, s, extra, extraValue)
	return append(appendFloat(b, v), '\n')
}

func (f *family) sampleUint(b []byte, suffix string, s *series, extra, extraValue string, v uint64) []byte {
	b = f.labelled(b, suffix, s, extra, extraValue)
	return append(strconv.AppendUint(b, v, 10), '\n')
}

// labelled appends the series' name and labels and the space before its
// value.
func (f *family) labelled(b []byte, suffix string, s *series, extra, extraValue string) []byte {
	b = append(b, f.name...)
	b = append(b, suffix...)
	if len(f.order) > 0 || extra != "" {
		b = append(b, '{')
		for k, i := range f.order {
			if k > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, f.labels[i], s.values[i])
		}
		if extra != "" {
			if len(f.order) > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, extra, extraValue)
		}
		b = append(b, '}')
	}
	return append(b, ' ')
}

func appendLabel(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, `="`...)
	b = appendEscaped(b, value, true)
	return append(b, '"')
}

// appendEscaped escapes a HELP text (\ and newline) or a label value
// (also ").
func appendEscaped(b []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat writes a value as the text format does.
func appendFloat(b []byte, v float64) []byte {
	switch {
	case v == 1:
		return append(b, '1')
	case v == 0:
		return append(b, '0')
	case v == -1:
		return append(b, "-1"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
