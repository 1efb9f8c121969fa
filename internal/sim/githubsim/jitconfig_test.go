package githubsim_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

// generate-jitconfig answers in the shape GitHub documents (the example
// response recorded in testdata, with its source), and its
// encoded_jit_config decodes the way Runner.Listener decodes --jitconfig:
// standard base64 of a JSON object mapping each of the runner's settings
// files to the standard base64 of its content.
func TestJITConfigResponseHasGitHubsShape(t *testing.T) {
	s := startSim(t, githubsim.Options{})
	gh := patClient(t, s)
	req, err := gh.NewRequest(http.MethodPost, "repos/acme/widgets/actions/runners/generate-jitconfig",
		map[string]any{"name": "shape-1", "runner_group_id": 1, "labels": []string{"self-hosted", "X64", "no-gpu"}, "work_folder": "_work"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	res, err := gh.Do(ctxT(t), req, &got)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("status %d, want 201", res.StatusCode)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "generate-jitconfig.docs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var docs map[string]any
	if err := json.Unmarshal(raw, &docs); err != nil {
		t.Fatal(err)
	}
	// Every documented field is there with the documented JSON type; the
	// simulator may add fields the runner schema has (ephemeral, runner_group_id).
	for _, diff := range missingFrom(docs, got, "") {
		t.Error(diff)
	}

	enc, _ := got["encoded_jit_config"].(string)
	outer, err := base64.StdEncoding.DecodeString(enc) // Convert.FromBase64String
	if err != nil {
		t.Fatalf("encoded_jit_config is not standard base64: %v", err)
	}
	var files map[string]string // Dictionary<string, string>
	if err := json.Unmarshal(outer, &files); err != nil {
		t.Fatalf("the decoded config is not a JSON object of strings: %v", err)
	}
	var names []string
	for name, content := range files {
		names = append(names, name)
		if _, err := base64.StdEncoding.DecodeString(content); err != nil {
			t.Errorf("file %s is not standard base64: %v", name, err)
		}
	}
	slices.Sort(names)
	if want := []string{".credentials", ".credentials_rsaparams", ".runner"}; !slices.Equal(names, want) {
		t.Errorf("the config holds files %q, want %q (HostContext.cs's Runner, Credentials, RSACredentials)", names, want)
	}
	// The simulator accepts the config it made: the files are what it checks on run.
	if r, err := s.RunRunner(ctxT(t), githubsim.RunRequest{JITConfig: enc}); err != nil || !r.JIT {
		t.Fatalf("run with the generated config = %+v, %v", r, err)
	}
}

// missingFrom lists the paths of want that got lacks or holds with another
// JSON type; arrays are compared by their first element.
func missingFrom(want, got any, path string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: an object in GitHub's docs, %T here", path, got)}
		}
		var out []string
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				out = append(out, fmt.Sprintf("%s.%s: documented, missing", path, k))
				continue
			}
			out = append(out, missingFrom(wv, gv, path+"."+k)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: an array in GitHub's docs, %T here", path, got)}
		}
		if len(w) == 0 || len(g) == 0 {
			return nil
		}
		return missingFrom(w[0], g[0], path+"[0]")
	default:
		if fmt.Sprintf("%T", want) != fmt.Sprintf("%T", got) {
			return []string{fmt.Sprintf("%s: %T in GitHub's docs, %T here", path, want, got)}
		}
		return nil
	}
}
