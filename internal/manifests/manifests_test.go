package manifests

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	objs, err := Decode("two.yaml", []byte("---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: b}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetName() != "a" || objs[1].GetKind() != "Secret" {
		t.Fatalf("decoded %d objects: %v", len(objs), objs)
	}
}

func TestDecodeErrorsNameTheSourceAndDocument(t *testing.T) {
	cases := map[string]string{
		"apiVersion: v1\nkind: ConfigMap\n---\nmetadata: {name: x}\n": "bad.yaml: document 2 has no apiVersion or kind",
		"apiVersion: v1\nkind: [unclosed\n":                           "bad.yaml: decoding document 1",
	}
	for in, want := range cases {
		_, err := Decode("bad.yaml", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) error = %v, want %q", in, err, want)
		}
	}
}

// Decode reads files people write; whatever they hold, it must return an
// error or objects, never panic or hang.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("kind: [\n"))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [{a: b}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode("fuzz", data)
		if err != nil {
			return
		}
		for _, o := range objs {
			if o.GetKind() == "" || o.GetAPIVersion() == "" {
				t.Fatalf("Decode returned an object without kind or apiVersion: %v", o.Object)
			}
		}
	})
}
