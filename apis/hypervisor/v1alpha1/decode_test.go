package v1alpha1_test

import (
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// The decoders client-go and controller-runtime use for a CRD's JSON (the
// apimachinery serializer over sigs.k8s.io/json) reach each kind's
// UnmarshalJSON, for the items of a LIST and for the object of a watch
// event alike, so one bad object never fails its neighbours.

const (
	goodClaim = `{"apiVersion":"hypervisor.hyperfleet.io/v1alpha1","kind":"MachineClaim","metadata":{"name":"good","namespace":"n"},"spec":{"templateRef":{"name":"t"},"timeout":"72h"}}`
	badClaim  = `{"apiVersion":"hypervisor.hyperfleet.io/v1alpha1","kind":"MachineClaim","metadata":{"name":"bad","namespace":"n"},"spec":{"templateRef":{"name":"t"},"timeout":"3d"}}`
	badTmpl   = `{"apiVersion":"hypervisor.hyperfleet.io/v1alpha1","kind":"HypervisorMachineTemplate","metadata":{"name":"bad","namespace":"n"},"spec":{"clusterRef":{"name":"pve"},"resources":{"cpuCores":2,"memory":"4 GiB"}}}`
)

func jsonSerializer(t *testing.T) (runtime.SerializerInfo, runtime.Decoder) {
	t.Helper()
	s := runtime.NewScheme()
	if err := hypervisorv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(s)
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		t.Fatal("no JSON serializer")
	}
	return info, codecs.WithoutConversion().DecoderToVersion(info.Serializer, hypervisorv1alpha1.GroupVersion)
}

func TestListWithOneUndecodableItem(t *testing.T) {
	_, dec := jsonSerializer(t)
	list := `{"apiVersion":"hypervisor.hyperfleet.io/v1alpha1","kind":"MachineClaimList","metadata":{},"items":[` + goodClaim + `,` + badClaim + `]}`
	into := &hypervisorv1alpha1.MachineClaimList{}
	if _, _, err := dec.Decode([]byte(list), nil, into); err != nil {
		t.Fatalf("decoding the list: %v", err)
	}
	if len(into.Items) != 2 {
		t.Fatalf("items = %d, want 2", len(into.Items))
	}
	good, bad := into.Items[0], into.Items[1]
	if len(good.DecodeFailures) != 0 || good.Spec.Timeout == nil {
		t.Errorf("good claim: failures %v, timeout %v", good.DecodeFailures, good.Spec.Timeout)
	}
	if len(bad.DecodeFailures) != 1 || bad.DecodeFailures[0].Path != "spec.timeout" || bad.Spec.TemplateRef.Name != "t" {
		t.Errorf("bad claim: failures %v, templateRef %q", bad.DecodeFailures, bad.Spec.TemplateRef.Name)
	}
	// DeepCopy keeps the failures: the cache hands out copies.
	if c := bad.DeepCopy(); len(c.DecodeFailures) != 1 {
		t.Errorf("DeepCopy lost the failures")
	}
}

func TestWatchEventWithUndecodableObject(t *testing.T) {
	info, dec := jsonSerializer(t)
	stream := `{"type":"ADDED","object":` + badTmpl + `}` + "\n" + `{"type":"MODIFIED","object":` + badClaim + `}` + "\n"
	frames := info.StreamSerializer.NewFrameReader(io.NopCloser(strings.NewReader(stream)))
	d := restclientwatch.NewDecoder(streaming.NewDecoder(frames, info.StreamSerializer.Serializer), dec)
	defer d.Close()

	typ, obj, err := d.Decode()
	if err != nil || typ != watch.Added {
		t.Fatalf("first event: %v %v", typ, err)
	}
	tmpl := obj.(*hypervisorv1alpha1.HypervisorMachineTemplate)
	if len(tmpl.DecodeFailures) != 1 || tmpl.DecodeFailures[0].Path != "spec.resources.memory" || tmpl.Spec.Resources.CPUCores != 2 {
		t.Errorf("template: failures %v, resources %+v", tmpl.DecodeFailures, tmpl.Spec.Resources)
	}
	typ, obj, err = d.Decode()
	if err != nil || typ != watch.Modified {
		t.Fatalf("second event: %v %v", typ, err)
	}
	if claim := obj.(*hypervisorv1alpha1.MachineClaim); len(claim.DecodeFailures) != 1 || claim.DecodeFailures[0].Path != "spec.timeout" {
		t.Errorf("claim: failures %v", claim.DecodeFailures)
	}
}

// What is written back never carries the failures, nor the zeroed fields
// beyond what was already zero.
func TestFailuresAreNeverSerialized(t *testing.T) {
	info, dec := jsonSerializer(t)
	claim := &hypervisorv1alpha1.MachineClaim{}
	if _, _, err := dec.Decode([]byte(badClaim), nil, claim); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := info.Serializer.Encode(claim, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "ecode") || strings.Contains(s, "timeout") {
		t.Errorf("encoded %s", s)
	}
}
