package githubsim_test

import (
	"slices"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

// RegistrationTokenUses says which runners each token registered, oldest
// token first, including a token used twice and one never used.
func TestRegistrationTokenUses(t *testing.T) {
	s := startSim(t, githubsim.Options{})
	gh := patClient(t, s)
	var toks []string
	for range 3 {
		tok, _, err := gh.Actions.CreateRegistrationToken(ctxT(t), "acme", "widgets")
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok.GetToken())
	}
	for _, reg := range []struct{ tok, name string }{{toks[0], "a"}, {toks[1], "b"}, {toks[0], "c"}} {
		if _, err := s.RegisterRunner(githubsim.RegisterRequest{URL: "https://github.com/acme/widgets", Token: reg.tok, Name: reg.name}); err != nil {
			t.Fatal(err)
		}
	}
	got := s.RegistrationTokenUses("ACME/widgets")
	want := [][]string{{"a", "c"}, {"b"}, {}}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("uses = %q, want %q", got, want)
	}
}
