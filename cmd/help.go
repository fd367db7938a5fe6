// How --help reads: the usage line and a summary of three lines at most
// first, then the examples, then the details, the flags and the exit
// status. A reader who wants to run the command finds how in the first
// screen; the root's help says where to start.

package cmd

import (
	"strings"
	"text/template"

	"github.com/spf13/cobra"
)

// helpTemplate lays out every command's --help. Long is cut by helpParts:
// its first paragraph is the summary, the rest the details, and its
// EXIT STATUS section (exitStatus) comes last.
const helpTemplate = `Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}

{{summary .}}
{{- if .HasExample}}

Examples:
{{.Example}}{{end}}
{{- with details .Long}}

{{.}}{{end}}
{{- if .HasAvailableSubCommands}}{{$cmds := .Commands}}
{{- if eq (len .Groups) 0}}

Commands:{{range $cmds}}{{if .IsAvailableCommand}}
  {{rpad .Name .NamePadding}} {{.Short}}{{end}}{{end}}
{{- else}}{{range $group := .Groups}}

{{.Title}}{{range $cmds}}{{if (and (eq .GroupID $group.ID) .IsAvailableCommand)}}
  {{rpad .Name .NamePadding}} {{.Short}}{{end}}{{end}}{{end}}
{{- if not .AllChildCommandsHaveGroup}}

Other commands:{{range $cmds}}{{if (and (eq .GroupID "") .IsAvailableCommand)}}
  {{rpad .Name .NamePadding}} {{.Short}}{{end}}{{end}}{{end}}{{end}}{{end}}
{{- if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}
{{- if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}
{{- with exitPart .Long}}

{{.}}{{end}}
{{- if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more about a command.{{end}}
`

func init() {
	cobra.EnableCommandSorting = false // the root's groups list their commands in the order a newcomer needs them
	cobra.AddTemplateFuncs(template.FuncMap{
		"summary": func(c *cobra.Command) string {
			s, _, _ := helpParts(c.Long)
			if s == "" {
				return c.Short
			}
			return s
		},
		"details":  func(long string) string { _, d, _ := helpParts(long); return d },
		"exitPart": func(long string) string { _, _, e := helpParts(long); return e },
	})
}

// helpParts cuts a command's long help into its summary (the first
// paragraph), its details (the paragraphs after it) and its EXIT STATUS
// section.
func helpParts(long string) (summary, details, exit string) {
	long = strings.TrimSpace(long)
	if i := strings.Index(long, "EXIT STATUS\n"); i >= 0 {
		long, exit = strings.TrimSpace(long[:i]), strings.TrimSpace(long[i:])
	}
	summary, details, _ = strings.Cut(long, "\n\n")
	return strings.TrimSpace(summary), strings.Trim(details, "\n"), exit
}

// The root's command groups, in the order its help lists them: where to
// start first.
var commandGroups = []*cobra.Group{
	{ID: "start", Title: "Start here:"},
	{ID: "policy", Title: "Choose a policy before traffic pays for it:"},
	{ID: "hand", Title: "The gate by hand, for shell loops and notebooks:"},
	{ID: "serve", Title: "Servers:"},
	{ID: "store", Title: "Many machines, one log in PostgreSQL:"},
}

// groupOf is each subcommand's group in the root's help.
var groupOf = map[string]string{
	"rehearse": "start", "time": "start", "report": "start", "check": "start",
	"tune": "policy", "simulate": "policy", "cost": "policy",
	"admit": "hand", "record": "hand", "claim": "hand",
	"seat": "serve", "proxy": "serve",
	"db": "store", "log": "store",
}
