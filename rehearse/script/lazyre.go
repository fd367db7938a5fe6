package script

import (
	"regexp"
	"sync"
)

// lazyRE is a regexp compiled on first use, so a run that parses no
// script (most commands) pays nothing for it at start-up.
type lazyRE struct {
	once sync.Once
	expr string
	re   *regexp.Regexp
}

func lazyRegexp(expr string) *lazyRE { return &lazyRE{expr: expr} }

func (l *lazyRE) get() *regexp.Regexp {
	l.once.Do(func() { l.re = regexp.MustCompile(l.expr) })
	return l.re
}

func (l *lazyRE) MatchString(s string) bool { return l.get().MatchString(s) }

func (l *lazyRE) FindStringSubmatch(s string) []string { return l.get().FindStringSubmatch(s) }
