package meta

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type sampleResources struct {
	Cores  int32              `json:"cores,omitempty"`
	Memory *resource.Quantity `json:"memory,omitempty"`
}

type sampleItem struct {
	Name string           `json:"name"`
	TTL  *metav1.Duration `json:"ttl,omitempty"`
}

type sampleSpec struct {
	Timeout   *metav1.Duration           `json:"timeout,omitempty"`
	Count     int32                      `json:"count,omitempty"`
	Resources *sampleResources           `json:"resources,omitempty"`
	Items     []sampleItem               `json:"items,omitempty"`
	ByName    map[string]sampleResources `json:"byName,omitempty"`
	Labels    map[string]string          `json:"labels,omitempty"`
}

type sample struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Undecoded         `json:"-"`
	Spec              sampleSpec `json:"spec"`
}

type sampleJSON sample

func (o *sample) UnmarshalJSON(b []byte) (err error) {
	o.DecodeFailures, err = UnmarshalTolerant(b, (*sampleJSON)(o))
	return err
}

func TestUnmarshalTolerant(t *testing.T) {
	const head = `{"apiVersion":"x/v1","kind":"Sample","metadata":{"name":"a","namespace":"n"},`
	tests := []struct {
		name  string
		json  string
		paths []string // the failures, by path
		check func(t *testing.T, o *sample)
	}{{
		name: "good object decodes strictly",
		json: head + `"spec":{"timeout":"72h","count":3,"resources":{"memory":"4Gi"}}}`,
		check: func(t *testing.T, o *sample) {
			if o.Spec.Timeout.Duration != 72*time.Hour || o.Spec.Count != 3 || o.Spec.Resources.Memory.String() != "4Gi" {
				t.Errorf("spec = %+v", o.Spec)
			}
		},
	}, {
		name:  "duration with a unit Go lacks",
		json:  head + `"spec":{"timeout":"3d","count":3}}`,
		paths: []string{"spec.timeout"},
		check: func(t *testing.T, o *sample) {
			if o.Spec.Timeout != nil || o.Spec.Count != 3 || o.Name != "a" || o.Namespace != "n" || o.Kind != "Sample" {
				t.Errorf("only spec.timeout must be zeroed: %+v", o)
			}
			if f := o.DecodeFailures[0]; f.Error != `time: unknown unit "d" in duration "3d"` || !strings.Contains(f.Hint, "72h") {
				t.Errorf("failure = %+v", f)
			}
		},
	}, {
		name:  "quantity nested in a pointer to a struct",
		json:  head + `"spec":{"resources":{"cores":2,"memory":"4 GiB"}}}`,
		paths: []string{"spec.resources.memory"},
		check: func(t *testing.T, o *sample) {
			if o.Spec.Resources == nil || o.Spec.Resources.Cores != 2 || o.Spec.Resources.Memory != nil {
				t.Errorf("resources = %+v", o.Spec.Resources)
			}
		},
	}, {
		name:  "int32 overflow",
		json:  head + `"spec":{"count":3000000000,"timeout":"1h"}}`,
		paths: []string{"spec.count"},
		check: func(t *testing.T, o *sample) {
			if o.Spec.Count != 0 || o.Spec.Timeout.Duration != time.Hour {
				t.Errorf("spec = %+v", o.Spec)
			}
			if f := o.DecodeFailures[0]; !strings.Contains(f.Error, "int32") || !strings.Contains(f.Hint, "int32") {
				t.Errorf("failure = %+v", f)
			}
		},
	}, {
		name:  "a field in one item of a list",
		json:  head + `"spec":{"items":[{"name":"x","ttl":"1h"},{"name":"y","ttl":"2w"}]}}`,
		paths: []string{"spec.items[1].ttl"},
		check: func(t *testing.T, o *sample) {
			if len(o.Spec.Items) != 2 || o.Spec.Items[0].TTL.Duration != time.Hour || o.Spec.Items[1].Name != "y" || o.Spec.Items[1].TTL != nil {
				t.Errorf("items = %+v", o.Spec.Items)
			}
		},
	}, {
		name:  "a field in a map value, and a wrong type",
		json:  head + `"spec":{"byName":{"big":{"cores":"many"}},"labels":{"a":1}}}`,
		paths: []string{"spec.byName.big.cores", "spec.labels.a"},
	}, {
		name:  "several failures, all reported",
		json:  head + `"spec":{"timeout":"3d","count":-3000000000,"resources":{"memory":"lots"}}}`,
		paths: []string{"spec.timeout", "spec.count", "spec.resources.memory"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &sample{}
			if err := o.UnmarshalJSON([]byte(tt.json)); err != nil {
				t.Fatalf("UnmarshalJSON: %v", err)
			}
			var paths []string
			for _, f := range o.DecodeFailures {
				paths = append(paths, f.Path)
			}
			if !reflect.DeepEqual(paths, tt.paths) {
				t.Errorf("failures = %v, want paths %v", o.DecodeFailures, tt.paths)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}

func TestUnmarshalTolerantRefuses(t *testing.T) {
	for name, data := range map[string]string{
		"not an object":     `[1,2]`,
		"undecodable name":  `{"metadata":{"name":3},"spec":{}}`,
		"undecodable kind":  `{"kind":{},"metadata":{"name":"a"},"spec":{}}`,
		"truncated":         `{"metadata":{"name":"a"},"spec":{`,
		"spec not a struct": `{"metadata":{"name":"a"},"spec":"x"}`,
	} {
		t.Run(name, func(t *testing.T) {
			o := &sample{}
			err := o.UnmarshalJSON([]byte(data))
			if name == "spec not a struct" {
				// The spec as a whole is the leaf that fails.
				if err != nil || len(o.DecodeFailures) != 1 || o.DecodeFailures[0].Path != "spec" {
					t.Fatalf("err = %v, failures = %v", err, o.DecodeFailures)
				}
				return
			}
			if err == nil {
				t.Fatalf("decoded %+v, want an error", o)
			}
		})
	}
}

// A decode that succeeds forgets the failures of an earlier one: the cache
// decodes into fresh objects, but a client decodes a write's response into
// the object it wrote.
func TestUnmarshalTolerantForgets(t *testing.T) {
	o := &sample{}
	if err := o.UnmarshalJSON([]byte(`{"metadata":{"name":"a"},"spec":{"timeout":"3d"}}`)); err != nil || len(o.DecodeFailures) != 1 {
		t.Fatalf("err = %v, failures = %v", err, o.DecodeFailures)
	}
	if err := o.UnmarshalJSON([]byte(`{"metadata":{"name":"a"},"spec":{"timeout":"72h"}}`)); err != nil || len(o.DecodeFailures) != 0 {
		t.Fatalf("err = %v, failures = %v", err, o.DecodeFailures)
	}
	if got := (DecodeFailure{Path: "spec.timeout", Error: "bad", Hint: "a duration"}).String(); got != "spec.timeout: bad (want a duration)" {
		t.Errorf("String() = %q", got)
	}
}
