package cmd

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// The JUnit XML that CI systems read (GitHub test reporters, GitLab,
// Jenkins): one suite, a test case per threshold and one for the held-out
// rows. A shadow proxy's log adds its figures to the suite's properties
// (shadow.*) and its words to system-out: they judge nothing, so they are
// no test case. No timestamps, so the same logs give the same bytes.
type junitSuites struct {
	XMLName  xml.Name   `xml:"testsuites"`
	Name     string     `xml:"name,attr"`
	Tests    int        `xml:"tests,attr"`
	Failures int        `xml:"failures,attr"`
	Suite    junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
	SystemOut  string          `xml:"system-out,omitempty"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Line      int           `xml:"line,attr,omitempty"`
	Failure   *junitFailure `xml:"failure"`
	Skipped   *junitSkipped `xml:"skipped"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

func checkJUnit(opts *CheckOptions, logs *logSet, res *summary.CheckResult) junitSuites {
	s := junitSuite{Name: "retrygate check"}
	s.Properties = []junitProperty{{"policy", opts.Policy}, {"budget", budgetLine(opts.Budget)}}
	for _, l := range displayNames(logs) {
		s.Properties = append(s.Properties, junitProperty{"log", l})
	}
	if res.Shadow != nil {
		for _, f := range shadowFigures(res.Shadow) {
			s.Properties = append(s.Properties, junitProperty{f.Name, strconv.FormatInt(f.N, 10)})
		}
	}
	for i, r := range res.Thresholds {
		c := junitCase{Classname: "thresholds", Name: r.Metric + " " + r.Threshold, File: filepath.ToSlash(opts.Policy), Line: opts.ThresholdLines[i]}
		if !r.Pass {
			obs := r.Aggregation + "=" + formatObserved(r.Spec, r.Value)
			text := fmt.Sprintf("observed %s (n=%d); the policy wants %s (%s)", obs, r.N, r.Threshold, r.Where)
			if r.Note != "" {
				text += "\n" + r.Note
			}
			c.Failure = &junitFailure{Message: obs + ", want " + r.Threshold, Type: "threshold", Text: text}
			s.Failures++
		}
		s.Cases = append(s.Cases, c)
	}
	held, refused := res.HeldOut.Rows, res.HeldOut.Refused
	hc := junitCase{Classname: "held-out", Name: "every held-out attempt is admitted"}
	switch {
	case held == 0:
		hc.Skipped = &junitSkipped{Message: "no held-out rows (holdout=true): nothing checks the budget against a run it was not tuned on"}
		s.Skipped++
	case len(refused) > 0:
		var b strings.Builder
		for _, r := range refused {
			fmt.Fprintf(&b, "%s:%d: %s\n", r.File, r.Line, changeText(r))
		}
		hc.Failure = &junitFailure{
			Message: fmt.Sprintf("the budget refuses %d of %d held-out %s: believe the refusal", len(refused), held, plural(int(held), "row", "rows")),
			Type:    "held-out", Text: b.String(),
		}
		s.Failures++
	}
	s.Cases = append(s.Cases, hc)
	s.Tests = len(s.Cases)
	var out strings.Builder
	fmt.Fprintf(&out, "%s\n", checkVerdict(opts, res))
	if res.Shadow != nil {
		head, more := shadowWords(res.Shadow, opts.Budget.Deadline)
		fmt.Fprintf(&out, "%s\n", head)
		for _, l := range more {
			fmt.Fprintf(&out, "  %s\n", l)
		}
	}
	for _, r := range res.Changes {
		fmt.Fprintf(&out, "%s:%d: %s\n", r.File, r.Line, changeText(r))
	}
	if extra := res.ChangesTotal - int64(len(res.Changes)); extra > 0 {
		fmt.Fprintf(&out, "… and %d more\n", extra)
	}
	s.SystemOut = out.String()
	return junitSuites{Name: "retrygate check", Tests: s.Tests, Failures: s.Failures, Suite: s}
}

func printCheckJUnit(w io.Writer, opts *CheckOptions, logs *logSet, res *summary.CheckResult) error {
	b, err := xml.MarshalIndent(checkJUnit(opts, logs, res), "", "  ")
	if err != nil {
		return fmt.Errorf("failed to write JUnit XML: %w", err)
	}
	if _, err := io.WriteString(w, xml.Header+string(b)+"\n"); err != nil {
		return fmt.Errorf("failed to write JUnit XML: %w", err)
	}
	return nil
}

// writeCheckJUnitFile writes the JUnit report to --junit's file (checked
// before any work, as --html is) whole or not at all (writeFileAtomic).
func writeCheckJUnitFile(opts *CheckOptions, logs *logSet, res *summary.CheckResult) error {
	var b bytes.Buffer
	if err := printCheckJUnit(&b, opts, logs, res); err != nil {
		return err
	}
	if err := writeFileAtomic(opts.JUnitFile, b.Bytes()); err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	return nil
}
