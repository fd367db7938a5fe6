package cmd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// closest is the one "did you mean" of the command line: the candidate
// nearest name (case ignored), when it is near enough to be a typo of it:
// within a third of the name's length in edits, rounded up (at least 1,
// at most 3), or name is a prefix of it.
func closest(name string, candidates []string) (string, bool) {
	ln := strings.ToLower(name)
	limit := min(max((len([]rune(ln))+2)/3, 1), 3)
	best, bestD := "", limit+1
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if lc == ln {
			continue
		}
		d := editDistance(ln, lc)
		if d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	if best != "" {
		return best, true
	}
	if len(ln) >= 3 {
		for _, c := range candidates {
			if strings.HasPrefix(strings.ToLower(c), ln) {
				return c, true
			}
		}
	}
	return "", false
}

// editDistance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and swaps of two neighbours each cost one, so
// "rehersal" is two edits from "rehearse".
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// guardGroups makes a command that only groups others (seat, and any
// later) refuse an unknown subcommand with exit 2 and a "did you mean",
// instead of printing its help and exiting 0 on a typo.
func guardGroups(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c == root || c.Runnable() || !c.HasSubCommands() {
			return
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			var names []string
			for _, s := range c.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, s.Name())
				}
			}
			e := badInput("unknown command %q for '%s'", args[0], c.CommandPath())
			if s, ok := closest(args[0], names); ok {
				return withHint(e, fmt.Sprintf("did you mean %s %s?", c.CommandPath(), s))
			}
			return withHint(e, fmt.Sprintf("see '%s --help'", c.CommandPath()))
		}
	}
	walk(root)
}
