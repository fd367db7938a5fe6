package cmd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The CI workflows users copy (docs/ci.md, and the README when it has one)
// and the composite action (action.yml) must fail closed. This test runs
// their shell steps exactly as written, as a GitHub runner would: a
// workflow's run: step under `bash -e FILE` (a run: step without shell:),
// the action's `shell: bash` steps under `bash --noprofile --norc -eo
// pipefail FILE`, with the expressions and environment a runner provides.
// uses: steps are skipped (the workspace is already checked out, Go is
// on PATH), except retrygate's own action, expanded into its steps.

type ghWorkflow struct {
	Jobs map[string]struct {
		RunsOn any      `yaml:"runs-on"`
		Steps  []ghStep `yaml:"steps"`
	} `yaml:"jobs"`
}

type ghStep struct {
	Name  string            `yaml:"name"`
	Uses  string            `yaml:"uses"`
	With  map[string]string `yaml:"with"`
	Run   string            `yaml:"run"`
	Shell string            `yaml:"shell"`
	Env   map[string]string `yaml:"env"`
	If    string            `yaml:"if"`
	Dir   string            `yaml:"working-directory"`
}

type ghAction struct {
	Inputs map[string]struct {
		Required bool   `yaml:"required"`
		Default  string `yaml:"default"`
	} `yaml:"inputs"`
	Runs struct {
		Using string   `yaml:"using"`
		Steps []ghStep `yaml:"steps"`
	} `yaml:"runs"`
}

// workflowActionRef is the ref a workflow's uses: names, as the runner
// gives it to the action (github.action_ref).
const workflowActionRef = "v1.4.0"

// ourAction is how a workflow names retrygate's action: <owner>/retrygate@<ref>.
var ourAction = regexp.MustCompile(`^[^/\s]+/retrygate@\S+$`)

var yamlBlock = regexp.MustCompile("(?ms)^```ya?ml\n(.*?)^```")

// workflowBlocks is every ```yaml block of a markdown file that is a whole
// workflow (it has runs-on:).
func workflowBlocks(t *testing.T, file string) []string {
	raw, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, m := range yamlBlock.FindAllStringSubmatch(string(raw), -1) {
		if strings.Contains(m[1], "runs-on:") {
			out = append(out, m[1])
		}
	}
	return out
}

func TestWorkflowDocsFailClosed(t *testing.T) {
	blocks := workflowBlocks(t, filepath.Join(flagRepo, "docs", "ci.md"))
	require.GreaterOrEqual(t, len(blocks), 2, "docs/ci.md shows the action's workflow and the plain run: one")
	testWorkflows(t, "docs/ci.md", blocks)
}

// The README's copy of the workflow must work as well as docs/ci.md's.
func TestWorkflowREADMEFailsClosed(t *testing.T) {
	blocks := workflowBlocks(t, filepath.Join(flagRepo, "README.md"))
	if len(blocks) == 0 {
		t.Skip("README.md shows no workflow")
	}
	testWorkflows(t, "README.md", blocks)
}

func testWorkflows(t *testing.T, doc string, blocks []string) {
	if testing.Short() {
		t.Skip("builds retrygate and runs each workflow three times")
	}
	if runtime.GOOS == "windows" {
		t.Skip("the runner's shell is bash")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	cases := []struct {
		name   string
		policy string // copied to retrygate.yaml
		log    bool   // mixed.log copied to rehearsal.log
		fail   bool
		out    string
	}{
		{"failing policy", "tight.yaml", true, true, "check: FAIL"},
		{"passing policy", "pass.yaml", true, false, "check: PASS"},
		{"missing log", "pass.yaml", false, true, `failed to open log "rehearsal.log"`},
	}
	for i, block := range blocks {
		var wf ghWorkflow
		require.NoError(t, yaml.Unmarshal([]byte(block), &wf), "%s: workflow %d", doc, i+1)
		require.NotEmpty(t, wf.Jobs, "%s: workflow %d has no jobs", doc, i+1)
		for jobName, job := range wf.Jobs {
			for _, c := range cases {
				t.Run(fmt.Sprintf("workflow%d/%s/%s", i+1, jobName, c.name), func(t *testing.T) {
					ws := t.TempDir()
					copyFile(t, filepath.Join(flagRepo, "testdata", "policies", c.policy), filepath.Join(ws, "retrygate.yaml"))
					if c.log {
						copyFile(t, filepath.Join(flagRepo, "testdata", "logs", "mixed.log"), filepath.Join(ws, "rehearsal.log"))
					}
					r := newFakeRunner(t, ws, job.Steps)
					code := r.run(job.Steps, nil, "")
					out := r.out.String()
					if c.fail {
						assert.NotZero(t, code, "%s's workflow %d passes with a %s: it fails open\n%s", doc, i+1, c.name, out)
					} else {
						assert.Zero(t, code, "%s's workflow %d fails with a %s\n%s", doc, i+1, c.name, out)
					}
					assert.Contains(t, out, c.out)
					if uses := usesOurAction(job.Steps); uses {
						// The action says which build judged the logs: the ref of uses:.
						assert.Contains(t, out, "retrygate "+workflowActionRef+"\n")
					}
					if c.policy == "tight.yaml" && strings.Contains(out, "::notice") {
						// Annotations name the workspace's files, so GitHub can place them.
						assert.Contains(t, out, "::error file=retrygate.yaml,line=7,")
						assert.Contains(t, out, "::error file=rehearsal.log,line=73,")
					}
					for _, f := range r.junit {
						if c.log {
							assert.FileExists(t, filepath.Join(ws, f), "the junit input's report")
						}
					}
				})
			}
		}
	}
}

// The runner here is as lax as GitHub's: the workflow issue 13 found (a
// pipe into tee under bash -e) goes green on a failing policy, and a
// shell: bash step (-eo pipefail) does not.
func TestWorkflowRunnerIsFaithful(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, tt := range []struct {
		shell string
		code  int
	}{{"", 0}, {"bash", ExitRefuse}} {
		ws := t.TempDir()
		copyFile(t, filepath.Join(flagRepo, "testdata", "policies", "tight.yaml"), filepath.Join(ws, "retrygate.yaml"))
		copyFile(t, filepath.Join(flagRepo, "testdata", "logs", "mixed.log"), filepath.Join(ws, "rehearsal.log"))
		steps := []ghStep{{Shell: tt.shell, Run: "retrygate check --policy retrygate.yaml --json rehearsal.log | tee check.json\n"}}
		r := newFakeRunner(t, ws, steps)
		assert.Equal(t, tt.code, r.run(steps, nil, ""), "shell: %q", tt.shell)
		assert.FileExists(t, filepath.Join(ws, "check.json"))
	}
}

// The action passes its inputs through env: an input pasted into a script
// would run as shell code.
func TestActionInputsNeverInScripts(t *testing.T) {
	a := loadAction(t)
	require.Equal(t, "composite", a.Runs.Using)
	var built bool
	for _, s := range a.Runs.Steps {
		assert.NotContains(t, s.Run, "${{", "step %q: expressions go in env:, not the script", s.Name)
		if s.Run != "" {
			assert.Equal(t, "bash", s.Shell, "step %q: shell: bash is -eo pipefail", s.Name)
		}
		if strings.Contains(s.Run, `go -C "$GITHUB_ACTION_PATH" build`) {
			built = true
		}
		if strings.HasPrefix(s.Uses, "actions/setup-go@") {
			assert.Equal(t, "${{ github.action_path }}/go.mod", s.With["go-version-file"], "the Go of retrygate's own go.mod")
		}
	}
	assert.True(t, built, "the action builds retrygate from its own checkout")
	for _, s := range a.Runs.Steps {
		if strings.Contains(s.Run, `go -C "$GITHUB_ACTION_PATH" build`) {
			// The version is the ref of uses: OWNER/retrygate@REF (docs/ci.md).
			assert.Equal(t, "${{ github.action_ref }}", s.Env["ACTION_REF"])
			assert.Contains(t, s.Run, `-ldflags "-X github.com/retrygate/retrygate/cmd.Version=${ACTION_REF:-(devel)}"`)
			assert.Contains(t, s.Run, `"$RUNNER_TEMP/retrygate" --version`)
		}
	}
	assert.True(t, a.Inputs["policy"].Required)
	assert.Equal(t, "rehearsal.log", a.Inputs["logs"].Default)
	assert.Equal(t, "github", a.Inputs["format"].Default)
}

// A log name in the inputs is data, not code.
func TestActionInputIsNotCode(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	ws := t.TempDir()
	copyFile(t, filepath.Join(flagRepo, "testdata", "policies", "pass.yaml"), filepath.Join(ws, "retrygate.yaml"))
	steps := []ghStep{{Uses: "someone/retrygate@v1", With: map[string]string{
		"policy": "retrygate.yaml", "logs": `$(touch pwned)"; touch pwned2 #`}}}
	r := newFakeRunner(t, ws, steps)
	code := r.run(steps, nil, "")
	assert.Equal(t, ExitBad, code, r.out.String())
	assert.NoFileExists(t, filepath.Join(ws, "pwned"))
	assert.NoFileExists(t, filepath.Join(ws, "pwned2"))
}

// The logs input takes several names and globs, as its description says.
func TestActionLogsGlob(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	ws := t.TempDir()
	copyFile(t, filepath.Join(flagRepo, "testdata", "policies", "tight.yaml"), filepath.Join(ws, "retrygate.yaml"))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "logs"), 0o755))
	copyFile(t, filepath.Join(flagRepo, "testdata", "logs", "mixed.log"), filepath.Join(ws, "logs", "a.log"))
	copyFile(t, filepath.Join(flagRepo, "testdata", "logs", "seed003.log"), filepath.Join(ws, "logs", "b.log"))
	steps := []ghStep{{Uses: "someone/retrygate@v1", With: map[string]string{
		"policy": "retrygate.yaml", "logs": "logs/*.log\n", "format": "json"}}}
	r := newFakeRunner(t, ws, steps)
	assert.Equal(t, ExitRefuse, r.run(steps, nil, ""), r.out.String())
	assert.Contains(t, r.out.String(), `"logs/a.log",`)
	assert.Contains(t, r.out.String(), `"logs/b.log"`)
}

func loadAction(t *testing.T) ghAction {
	raw, err := os.ReadFile(filepath.Join(flagRepo, "action.yml"))
	require.NoError(t, err)
	var a ghAction
	require.NoError(t, yaml.Unmarshal(raw, &a))
	return a
}

func copyFile(t *testing.T, from, to string) {
	raw, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, raw, 0o644))
}

// fakeRunner is the part of a GitHub runner that runs shell steps.
type fakeRunner struct {
	t       *testing.T
	ws      string // GITHUB_WORKSPACE, the checked-out repository
	temp    string // the runner's own files
	path    []string
	env     map[string]string // from GITHUB_ENV
	out     bytes.Buffer
	failed  bool
	junit   []string // junit: inputs given to our action
	ghPath  string
	ghEnv   string
	summary string
	// runnerTemp is RUNNER_TEMP (see runnerTemp); temp holds the
	// runner's own files (scripts, GITHUB_PATH, GITHUB_ENV).
	runnerTemp string
}

// workflowBin is a retrygate built from this checkout, for workflows that
// expect one on PATH: the test binary's own static build
// (retrygateBinary), so the package builds retrygate once.
func workflowBin(t *testing.T) string {
	return filepath.Dir(retrygateBinary(t))
}

var (
	runnerTempOnce sync.Once
	runnerTempDir  string
	runnerTempErr  error
)

// runnerTemp is RUNNER_TEMP, one for every workflow the package runs: the
// action builds retrygate into it, and a build whose output is there and
// up to date is not linked again (a link is most of a minute on a loaded
// machine, and the workflows run a dozen times). The build step still
// runs, and must succeed, each time; TestActionInputsNeverInScripts holds
// the action to building from its own checkout.
func runnerTemp(t *testing.T) string {
	runnerTempOnce.Do(func() {
		runnerTempDir, runnerTempErr = os.MkdirTemp("", "retrygate-runner-temp-")
	})
	require.NoError(t, runnerTempErr)
	return runnerTempDir
}

func newFakeRunner(t *testing.T, ws string, steps []ghStep) *fakeRunner {
	temp := t.TempDir()
	r := &fakeRunner{t: t, ws: ws, temp: temp, runnerTemp: runnerTemp(t), env: map[string]string{},
		ghPath: filepath.Join(temp, "github_path"), ghEnv: filepath.Join(temp, "github_env"),
		summary: filepath.Join(temp, "step_summary")}
	// A workflow that neither uses our action nor builds retrygate
	// expects one on PATH.
	builds := false
	for _, s := range steps {
		if ourAction.MatchString(s.Uses) || strings.Contains(s.Run, "go build") || strings.Contains(s.Run, "go install") {
			builds = true
		}
	}
	if !builds {
		r.path = append(r.path, workflowBin(t))
	}
	for _, f := range []string{r.ghPath, r.ghEnv, r.summary} {
		require.NoError(t, os.WriteFile(f, nil, 0o644))
	}
	return r
}

// run runs steps as one job (or one composite action, given its inputs
// and path) and returns the job's exit status: the first failing step's.
func (r *fakeRunner) run(steps []ghStep, inputs map[string]string, actionPath string) int {
	t := r.t
	status := 0
	for i, s := range steps {
		cond := strings.TrimSpace(strings.Trim(strings.TrimSpace(s.If), "${}"))
		switch {
		case cond == "" || cond == "success()":
			if r.failed {
				continue
			}
		case cond == "always()" || cond == "!cancelled()":
		case cond == "failure()":
			if !r.failed {
				continue
			}
		default:
			t.Fatalf("step %d: if: %q is not something this test knows", i+1, s.If)
		}
		var code int
		switch {
		case ourAction.MatchString(s.Uses):
			code = r.runAction(s)
		case s.Uses != "":
			continue // checkout, setup-go, upload-artifact: the test has done their part
		case s.Run != "":
			code = r.runShell(s, inputs, actionPath)
		default:
			t.Fatalf("step %d has neither uses: nor run:", i+1)
		}
		if code != 0 {
			r.failed = true
			if status == 0 {
				status = code
			}
		}
	}
	return status
}

func (r *fakeRunner) runAction(s ghStep) int {
	t := r.t
	a := loadAction(t)
	inputs := map[string]string{}
	for name, in := range a.Inputs {
		inputs[name] = in.Default
	}
	for k, v := range s.With {
		_, known := a.Inputs[k]
		require.True(t, known, "with: %s is not an input of action.yml", k)
		inputs[k] = v
	}
	for name, in := range a.Inputs {
		if in.Required {
			require.NotEmpty(t, inputs[name], "input %s is required", name)
		}
	}
	if inputs["junit"] != "" {
		r.junit = append(r.junit, inputs["junit"])
	}
	// The action's steps run as a job of their own would, but their
	// failure is the calling step's.
	sub := &fakeRunner{t: t, ws: r.ws, temp: r.temp, runnerTemp: r.runnerTemp, path: r.path, env: r.env, ghPath: r.ghPath, ghEnv: r.ghEnv, summary: r.summary}
	code := sub.run(a.Runs.Steps, inputs, flagRepo)
	r.out.Write(sub.out.Bytes())
	r.path = sub.path
	return code
}

var ghExpr = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`)

// expand substitutes the ${{ }} expressions a runner would.
func (r *fakeRunner) expand(s string, inputs map[string]string, actionPath string) string {
	return ghExpr.ReplaceAllStringFunc(s, func(m string) string {
		e := ghExpr.FindStringSubmatch(m)[1]
		switch {
		case e == "github.workspace":
			return r.ws
		case e == "runner.temp":
			return r.runnerTemp
		case e == "github.action_path" && actionPath != "":
			return actionPath
		case e == "github.action_ref" && actionPath != "":
			return workflowActionRef
		case strings.HasPrefix(e, "inputs.") && inputs != nil:
			return inputs[strings.TrimPrefix(e, "inputs.")]
		}
		r.t.Fatalf("expression %q is not something this test knows", m)
		return ""
	})
}

func (r *fakeRunner) runShell(s ghStep, inputs map[string]string, actionPath string) int {
	t := r.t
	var argv []string
	script := filepath.Join(r.temp, fmt.Sprintf("step-%d.sh", time.Now().UnixNano()))
	switch s.Shell {
	case "":
		argv = []string{"bash", "-e", script} // GitHub's default: bash -e {0}
	case "bash":
		argv = []string{"bash", "--noprofile", "--norc", "-eo", "pipefail", script}
	default:
		t.Fatalf("shell: %q is not something this test knows", s.Shell)
	}
	// The script as written: only expressions substituted, as the runner does.
	require.NoError(t, os.WriteFile(script, []byte(r.expand(s.Run, inputs, actionPath)), 0o644))

	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "RETRYGATE_") || strings.HasPrefix(k, "GITHUB_") || strings.HasPrefix(k, "INPUT_") || k == "PATH" || k == "RUNNER_TEMP" {
			continue
		}
		env = append(env, kv)
	}
	path := slices.Clone(r.path)
	slices.Reverse(path) // GITHUB_PATH prepends: the last added comes first
	path = append(path, os.Getenv("PATH"))
	env = append(env, "PATH="+strings.Join(path, string(os.PathListSeparator)),
		"CI=true", "GITHUB_ACTIONS=true", "GITHUB_WORKSPACE="+r.ws, "RUNNER_TEMP="+r.runnerTemp,
		"GITHUB_PATH="+r.ghPath, "GITHUB_ENV="+r.ghEnv, "GITHUB_STEP_SUMMARY="+r.summary)
	if actionPath != "" {
		env = append(env, "GITHUB_ACTION_PATH="+actionPath)
	}
	for k, v := range r.env {
		env = append(env, k+"="+v)
	}
	for k, v := range s.Env {
		env = append(env, k+"="+r.expand(v, inputs, actionPath))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = r.ws
	if s.Dir != "" {
		cmd.Dir = filepath.Join(r.ws, r.expand(s.Dir, inputs, actionPath))
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &r.out, &r.out
	err := cmd.Run()
	r.readRunnerFiles()
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("running %v: %v", argv, err)
	return -1
}

// readRunnerFiles takes what a step wrote to GITHUB_PATH and GITHUB_ENV
// (simple NAME=value lines), as the runner does between steps.
func (r *fakeRunner) readRunnerFiles() {
	if raw, err := os.ReadFile(r.ghPath); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(r.path, l) {
				r.path = append(r.path, l)
			}
		}
	}
	if raw, err := os.ReadFile(r.ghEnv); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				r.env[k] = v
			}
		}
	}
}

func usesOurAction(steps []ghStep) bool {
	for _, s := range steps {
		if ourAction.MatchString(s.Uses) {
			return true
		}
	}
	return false
}
