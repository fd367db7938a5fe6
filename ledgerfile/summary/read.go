package summary

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"time"

	"retrygate/ledgerfile"
)

// maxParsers bounds the goroutines that parse for one scan: past a few,
// the one aggregator is the bottleneck, and each holds batches in memory.
const maxParsers = 4

// Scan reads every row of one log and hands each to fn, in order, on
// the caller's goroutine. With skipBad, malformed lines are collected in
// Skipped instead of stopping the scan; torn lines are never fatal and
// come back in Torn. Every row before an error reaches fn first.
//
// Lines are parsed on every core (ledgerfile.Reader.Workers) while fn
// counts the rows before them; the reader copies or interns every string
// it stores, so a row outlives the line it came from. The reader keeps a
// bounded number of lines in flight, so memory stays bounded whatever the
// log's size.
func Scan(r io.Reader, name string, skipBad bool, fn func(*ledgerfile.Row)) (torn, skipped []*ledgerfile.LineError, err error) {
	return ScanEvents(r, name, skipBad, fn, nil)
}

// ScanEvents is Scan that also hands event each `# event` line, in file
// order among the rows (a Summarizer's AddEvent, for the breaker's spans).
func ScanEvents(r io.Reader, name string, skipBad bool, fn func(*ledgerfile.Row), event func(*ledgerfile.Event)) (torn, skipped []*ledgerfile.LineError, err error) {
	rd := ledgerfile.NewReader(r, name)
	if event != nil {
		rd.OnEvent(event)
	}
	rd.SkipBad(skipBad)
	rd.Workers(min(runtime.GOMAXPROCS(0), maxParsers))
	defer rd.Close()
	var row ledgerfile.Row
	for {
		if e := rd.Next(&row); e != nil {
			if e != io.EOF {
				err = e
			}
			return rd.Torn(), rd.Skipped(), err
		}
		fn(&row)
	}
}

// NewestTS is the latest ts of any complete row in r: what a relative
// --since counts back from, so that a report never reads the clock. It is
// a quick scan for the ts key, not a strict read; the strict read comes
// after. ok is false when no row carries a ts.
func NewestTS(r io.Reader) (newest time.Time, ok bool, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	// The ts of the line before, counted once the line after it is known
	// not to be a torn marker naming it (the strict read skips that line).
	var held time.Time
	hasHeld := false
	keep := func() {
		if hasHeld && (!ok || held.After(newest)) {
			newest, ok = held, true
		}
		hasHeld = false
	}
	defer keep()
	for {
		line, rerr := br.ReadSlice('\n')
		if errors.Is(rerr, bufio.ErrBufferFull) {
			// A very long line: skip the rest of it.
			for errors.Is(rerr, bufio.ErrBufferFull) {
				_, rerr = br.ReadSlice('\n')
			}
			if rerr == io.EOF {
				return newest, ok, nil
			}
			keep()
			continue
		}
		if rerr == io.EOF {
			// A final line without a newline is torn: the strict read skips
			// it too (and the line above it when it is a torn marker).
			if ledgerfile.IsTornMarker(line) {
				hasHeld = false
			}
			return newest, ok, nil
		}
		if rerr != nil {
			return newest, ok, rerr
		}
		if ledgerfile.IsTornMarker(bytes.TrimSuffix(line, []byte("\n"))) {
			hasHeld = false
			continue
		}
		keep()
		held, hasHeld = lineTS(line)
	}
}

func lineTS(line []byte) (time.Time, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '#' {
		return time.Time{}, false
	}
	i := 0
	for {
		j := bytes.Index(line[i:], []byte("ts="))
		if j < 0 {
			return time.Time{}, false
		}
		at := i + j
		if at == 0 || line[at-1] == ' ' || line[at-1] == '\t' {
			v := line[at+3:]
			if k := bytes.IndexAny(v, " \t"); k >= 0 {
				v = v[:k]
			}
			v = bytes.Trim(v, `"`)
			t, err := time.Parse(time.RFC3339Nano, string(v))
			if err != nil {
				return time.Time{}, false
			}
			return t.UTC(), true
		}
		i = at + 3
	}
}
