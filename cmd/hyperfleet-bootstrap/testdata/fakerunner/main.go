// Command fakerunner stands in for the actions runner's config.sh and
// run.sh in tests: it speaks to githubsim's runner endpoints the way the
// real runner speaks to GitHub, and keeps its registration in .runner as
// config.sh does.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

type registration struct {
	ID  int64  `json:"id"`
	URL string `json:"url"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fakerunner config|run [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "config":
		err = configure(os.Args[2:])
	case "run":
		err = run(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakerunner:", err)
		os.Exit(1)
	}
}

func configure(args []string) error {
	fs := flag.NewFlagSet("config.sh", flag.ContinueOnError)
	u := fs.String("url", "", "")
	token := fs.String("token", "", "")
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
	if *u == "" || *token == "" || *name == "" {
		return fmt.Errorf("config.sh needs --url, --token and --name")
	}
	var ls []string
	if *labels != "" {
		ls = strings.Split(*labels, ",")
	}
	body := map[string]any{"url": *u, "token": *token, "name": *name, "labels": ls, "ephemeral": *ephemeral,
		"runner_group": *group, "work_folder": *work, "replace": *replace}
	var out registration
	if err := post(*u, "/_sim/runners/register", body, &out); err != nil {
		return err
	}
	out.URL = *u
	data, _ := json.Marshal(out)
	fmt.Printf("√ Runner successfully added\n√ Settings Saved.\n")
	return os.WriteFile(".runner", data, 0o600)
}

func run(args []string) error {
	fs := flag.NewFlagSet("run.sh", flag.ContinueOnError)
	jit := fs.String("jitconfig", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	body := map[string]any{"wait": true}
	var base string
	if *jit != "" {
		body["jitconfig"] = *jit
		base = os.Getenv("FAKERUNNER_GITHUB_URL")
	} else {
		data, err := os.ReadFile(".runner")
		if err != nil {
			return fmt.Errorf("not configured: %w", err)
		}
		var reg registration
		if err := json.Unmarshal(data, &reg); err != nil {
			return err
		}
		body["id"], base = reg.ID, reg.URL
	}
	fmt.Println("√ Connected to GitHub")
	fmt.Println("Listening for Jobs")
	if err := post(base, "/_sim/runners/run", body, nil); err != nil {
		return err
	}
	fmt.Println("Job completed; the ephemeral runner exits")
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
