// Command fakerunner stands in for the actions runner's config.sh and
// run.sh in tests: it speaks to githubsim's runner endpoints the way the
// real runner speaks to GitHub, and keeps its settings where the real one
// does (.runner, .credentials in its directory). Like Runner.Listener it
// takes any argument from ACTIONS_RUNNER_INPUT_<NAME> as well, and writes a
// JIT config's files before running. With FAKERUNNER_JOB_OUTPUT set, run
// also runs a "job" (the job subcommand) as its own child, as
// Runner.Worker runs a job's steps.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// settings is the part of .runner the fake reads back: GitHub's shape, as
// config.sh and a JIT config write it.
type settings struct {
	AgentID   string `json:"AgentId"`
	AgentName string `json:"AgentName"`
	GitHubURL string `json:"GitHubUrl"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fakerunner config|run|job [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "config":
		err = configure(os.Args[2:])
	case "run":
		err = run(os.Args[2:])
	case "job":
		err = job(os.Getenv("FAKERUNNER_VM_ROOT"), os.Getenv("FAKERUNNER_JOB_OUTPUT"))
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakerunner:", err)
		os.Exit(1)
	}
}

// input is a flag's value, else ACTIONS_RUNNER_INPUT_<NAME>, which is then
// removed from the environment handed on, as CommandSettings.cs does.
func input(flagValue, name string) string {
	key := "ACTIONS_RUNNER_INPUT_" + strings.ToUpper(name)
	v := os.Getenv(key)
	_ = os.Unsetenv(key)
	if flagValue != "" {
		return flagValue
	}
	return v
}

func configure(args []string) error {
	fs := flag.NewFlagSet("config.sh", flag.ContinueOnError)
	u := fs.String("url", "", "")
	tokenFlag := fs.String("token", "", "")
	name := fs.String("name", "", "")
	labels := fs.String("labels", "", "")
	group := fs.String("runnergroup", "", "")
	work := fs.String("work", "_work", "")
	fs.Bool("unattended", false, "")
	ephemeral := fs.Bool("ephemeral", false, "")
	replace := fs.Bool("replace", false, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	token := input(*tokenFlag, "token")
	if *u == "" || token == "" || *name == "" {
		return fmt.Errorf("config.sh needs --url, --token (or ACTIONS_RUNNER_INPUT_TOKEN) and --name")
	}
	var ls []string
	if *labels != "" {
		ls = strings.Split(*labels, ",")
	}
	body := map[string]any{"url": *u, "token": token, "name": *name, "labels": ls, "ephemeral": *ephemeral,
		"runner_group": *group, "work_folder": *work, "replace": *replace}
	var out struct {
		ID int64 `json:"id"`
	}
	if err := post(*u, "/_sim/runners/register", body, &out); err != nil {
		return err
	}
	data, _ := json.Marshal(settings{AgentID: strconv.FormatInt(out.ID, 10), AgentName: *name, GitHubURL: *u})
	fmt.Printf("√ Runner successfully added\n√ Settings Saved.\n")
	return os.WriteFile(".runner", data, 0o600)
}

func run(args []string) error {
	fs := flag.NewFlagSet("run.sh", flag.ContinueOnError)
	jitFlag := fs.String("jitconfig", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if jit := input(*jitFlag, "jitconfig"); jit != "" {
		if err := writeJITFiles(jit); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(".runner")
	if err != nil {
		return fmt.Errorf("not configured: %w", err)
	}
	var s settings
	if err := json.Unmarshal(bytes.TrimPrefix(data, []byte("\ufeff")), &s); err != nil {
		return err
	}
	id, err := strconv.ParseInt(s.AgentID, 10, 64)
	if err != nil {
		return fmt.Errorf(".runner: AgentId %q: %w", s.AgentID, err)
	}
	req := map[string]any{"id": id, "wait": true}
	if creds, err := credentials(); err != nil {
		return err
	} else if creds != "" {
		req = map[string]any{"jitconfig": creds, "wait": true}
	}
	fmt.Println("√ Connected to GitHub")
	fmt.Println("Listening for Jobs")
	done := make(chan error, 1)
	go func() { done <- post(s.GitHubURL, "/_sim/runners/run", req, nil) }()
	if os.Getenv("FAKERUNNER_JOB_OUTPUT") != "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cmd := exec.Command(self, "job")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("the job failed: %w", err)
		}
	}
	if err := <-done; err != nil {
		return err
	}
	fmt.Println("Job completed; the ephemeral runner exits")
	return nil
}

// jitSettingsFiles are the files a JIT config holds (HostContext.cs's
// WellKnownConfigFile Runner, Credentials, RSACredentials).
var jitSettingsFiles = []string{".runner", ".credentials", ".credentials_rsaparams"}

// credentials is how the runner proves to githubsim who it is: as the real
// listener authenticates with the .credentials (and RSA key) in its
// directory, the fake hands githubsim those files, as they are on disk, in
// a JIT config's encoding. No .credentials (a runner config.sh registered
// here, which writes .runner only) gives "", and the runner starts by ID.
// A file the agent wrote wrongly or not at all makes githubsim refuse.
func credentials() (string, error) {
	if _, err := os.Stat(".credentials"); os.IsNotExist(err) {
		return "", nil
	}
	files := map[string]string{}
	for _, name := range jitSettingsFiles {
		data, err := os.ReadFile(name) //nolint:gosec // the runner's own settings files
		if err != nil {
			return "", fmt.Errorf("reading the runner's settings: %w", err)
		}
		files[name] = base64.StdEncoding.EncodeToString(data)
	}
	outer, err := json.Marshal(files)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(outer), nil
}

// writeJITFiles does what Runner.Listener does with --jitconfig: it writes
// the files the config holds into the runner's directory.
func writeJITFiles(encoded string) error {
	outer, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return err
	}
	var files map[string]string
	if err := json.Unmarshal(outer, &files); err != nil {
		return err
	}
	for name, content := range files {
		data, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Base(name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// job is what a workflow job could see: it writes to out every file under
// root it can read, and the command line and environment of every process
// whose /proc entries it can read, with its own uid. The test searches the
// output for credentials; the job itself is given none to look for.
func job(root, out string) error {
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600) //nolint:gosec // the test's path
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	fmt.Fprintf(f, "uid %d\n", os.Getuid())
	files := 0
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // unreadable directories are what the job cannot see
		}
		data, err := os.ReadFile(path) //nolint:gosec // reading what a job could read is the point
		if err != nil {
			return nil
		}
		files++
		fmt.Fprintf(f, "file %s\n%s\n", path, data)
		return nil
	})
	procs, _ := os.ReadDir("/proc")
	readable := 0
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		for _, what := range []string{"cmdline", "environ"} {
			data, err := os.ReadFile(filepath.Join("/proc", p.Name(), what))
			if err != nil {
				continue
			}
			if what == "environ" {
				readable++
			}
			fmt.Fprintf(f, "proc %s %s\n%s\n", p.Name(), what, bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
		}
	}
	fmt.Printf("job: searched %d readable files under %s and %d processes' environments\n", files, root, readable)
	return nil
}

func post(base, path string, body, out any) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(body)
	res, err := http.Post(u.Scheme+"://"+u.Host+path, "application/json", bytes.NewReader(data))
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s: HTTP %d: %s", path, res.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}
