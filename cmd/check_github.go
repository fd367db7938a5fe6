package cmd

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// maxAnnotatedChanges bounds the warnings for changed decisions: GitHub
// shows only the first few of a step, and the report above lists them all.
const maxAnnotatedChanges = 50

// printCheckGitHub writes the plain report, then GitHub workflow commands:
// an error at the policy line of each failed threshold, an error at the
// log line of each held-out attempt the budget refuses, a warning at the
// log line of every other decision that changes, a notice with what
// enforcing would change on a shadow proxy's log, and a notice with the
// verdict. The exit status carries the verdict; the annotations show it.
func printCheckGitHub(opts *CheckOptions, res *summary.CheckResult) error {
	if err := printCheck(opts, res); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteByte('\n')
	for i, r := range res.Thresholds {
		if r.Pass {
			continue
		}
		msg := fmt.Sprintf("%s %s=%s breaks the threshold %q", r.Metric, r.Aggregation, formatObserved(r.Spec, r.Value), r.Threshold)
		if r.Note != "" {
			msg += " (" + r.Note + ")"
		}
		writeWorkflowCommand(&b, "error", annotationFile(opts, opts.Policy), opts.ThresholdLines[i],
			"threshold failed: "+r.Metric+" "+r.Threshold, msg)
	}
	for _, r := range res.HeldOut.Refused {
		writeWorkflowCommand(&b, "error", annotationFile(opts, r.File), r.Line,
			"held-out attempt refused", changeText(r)+"; it is held out, so the check fails: believe the refusal")
	}
	warned := 0
	for _, r := range res.Changes {
		if r.HeldOut && r.Refused() {
			continue // an error above
		}
		if warned == maxAnnotatedChanges {
			break
		}
		warned++
		writeWorkflowCommand(&b, "warning", annotationFile(opts, r.File), r.Line, "decision changes under this policy", changeText(r))
	}
	if res.Shadow != nil {
		head, more := shadowWords(res.Shadow, opts.Budget.Deadline)
		writeWorkflowCommand(&b, "notice", "", 0, "retrygate shadow", head+"\n"+strings.Join(more, "\n"))
	}
	writeWorkflowCommand(&b, "notice", "", 0, "retrygate check", checkVerdict(opts, res))
	_, err := io.WriteString(opts.IO.Out, b.String())
	return err
}

// changeText says what one replayed row's decisions are, in a sentence.
func changeText(r summary.Replayed) string {
	who := "a row with no job"
	if r.Job != "" {
		who = "job " + r.Job
		if r.Attempt > 0 {
			who += fmt.Sprintf(" attempt %d", r.Attempt)
		}
	}
	if r.Seat != "" {
		who += " (seat " + r.Seat + ")"
	}
	return fmt.Sprintf("%s: the log says %s; this policy says %s", who, r.Logged, replayedNow(r))
}

// checkVerdict is the one-line verdict of a check, with what it judged.
func checkVerdict(opts *CheckOptions, res *summary.CheckResult) string {
	rows := res.Judged + res.HeldOut.Rows
	return fmt.Sprintf("check %s: %s; %d of %d %s change under policy %s", passFail[res.Pass], verdictCounts(res),
		res.ChangesTotal, rows, plural(int(rows), "decision", "decisions"), opts.Policy)
}

// annotationFile is a path as GitHub matches it: relative to the workspace
// (the repository root) and with forward slashes.
func annotationFile(opts *CheckOptions, name string) string {
	if name == "" || name == "-" {
		return ""
	}
	if opts.Workspace != "" && filepath.IsAbs(name) {
		if rel, err := filepath.Rel(opts.Workspace, name); err == nil && !strings.HasPrefix(rel, "..") {
			name = rel
		}
	}
	return filepath.ToSlash(filepath.Clean(name))
}

// writeWorkflowCommand writes one "::kind file=F,line=N,title=T::message",
// escaped as the workflow-commands spec says: %, CR and LF in the message;
// those and also ':' and ',' in a property.
func writeWorkflowCommand(b *strings.Builder, kind, file string, line int, title, msg string) {
	b.WriteString("::")
	b.WriteString(kind)
	var props []string
	if file != "" {
		props = append(props, "file="+propertyEscaper.Replace(file))
		if line > 0 {
			props = append(props, fmt.Sprintf("line=%d", line))
		}
	}
	if title != "" {
		props = append(props, "title="+propertyEscaper.Replace(title))
	}
	if len(props) > 0 {
		b.WriteByte(' ')
		b.WriteString(strings.Join(props, ","))
	}
	b.WriteString("::")
	b.WriteString(dataEscaper.Replace(msg))
	b.WriteByte('\n')
}

var (
	dataEscaper     = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	propertyEscaper = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
)
