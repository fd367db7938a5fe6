package summary

import (
	"io"
	"runtime"

	"github.com/retrygate/retrygate/ledgerfile"
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
	return ScanEvents(r, name, skipBad, fn, nil, nil)
}

// ScanEvents is Scan that also hands event each `# event` line (a
// Summarizer's AddEvent, for the breaker's spans) and comment every other
// comment line (ledgerfile.Reader's OnEvent and OnComment), in file order
// among the rows; either may be nil.
func ScanEvents(r io.Reader, name string, skipBad bool, fn func(*ledgerfile.Row), event func(*ledgerfile.Event), comment func(line int, text string)) (torn, skipped []*ledgerfile.LineError, err error) {
	rd := ledgerfile.NewReader(r, name)
	if event != nil {
		rd.OnEvent(event)
	}
	if comment != nil {
		rd.OnComment(comment)
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
