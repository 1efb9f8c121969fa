package meta

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// An object stored under an older or looser schema (before an upgrade made
// the CRD stricter, say) can hold a value the Go types cannot decode:
// `spec.timeout: 3d`. The informer decodes a LIST into a typed list, and a
// single such item fails the whole list, so no object of the kind would be
// reconciled for anyone. Every kind therefore decodes itself tolerantly
// (UnmarshalTolerant): the fields that fail are left zero and recorded in
// DecodeFailures, which is never serialized, so the object still reaches its
// reconciler, whose shared guard refuses to act on it and says why.

// DecodeFailure is one field of a stored object that could not be decoded.
type DecodeFailure struct {
	// Path names the field from the object's root, as a person would look
	// for it: spec.template.resources.memory, spec.items[2].name.
	Path string
	// Error is the decoder's reason, e.g. time: unknown unit "d" in duration "3d".
	Error string
	// Hint says what the field accepts, when its type says so.
	Hint string
}

// String renders the failure for a condition message or an event.
func (f DecodeFailure) String() string {
	if f.Hint == "" {
		return f.Path + ": " + f.Error
	}
	return f.Path + ": " + f.Error + " (want " + f.Hint + ")"
}

// Undecoded is embedded in every kind as `json:"-"`: the failures of the
// last decode, kept by DeepCopy (so they survive the cache's copies) and never
// written back to the API server, nor into the CRD schema.
type Undecoded struct {
	// DecodeFailures is empty when the object decoded as it was stored.
	DecodeFailures []DecodeFailure `json:"-"`
}

// GetDecodeFailures returns the fields the last decode left zero.
func (u *Undecoded) GetDecodeFailures() []DecodeFailure { return u.DecodeFailures }

// +kubebuilder:object:generate=false

// DecodeFailuresAccessor is implemented by every HyperFleet kind (through
// Undecoded), so the reconcilers' shared guard finds an undecodable object
// without knowing its type.
type DecodeFailuresAccessor interface {
	GetDecodeFailures() []DecodeFailure
}

// UnmarshalTolerant decodes data into v, a pointer to a kind's alias type
// (one without an UnmarshalJSON of its own, so this does not recurse), as
// the API machinery does: sigs.k8s.io/json, case-sensitive, ints preserved.
// When that fails, it decodes again field by field, leaving zero only the
// leaves that fail, and returns them. The identity of the object (apiVersion,
// kind, metadata) must decode: without a name the object cannot be
// reconciled nor even told about, so that failure is returned as an error.
func UnmarshalTolerant(data []byte, v any) ([]DecodeFailure, error) {
	err := kjson.UnmarshalCaseSensitivePreserveInts(data, v)
	if err == nil {
		return nil, nil
	}
	rv := reflect.ValueOf(v).Elem()
	rv.Set(reflect.Zero(rv.Type()))
	var failures []DecodeFailure
	if !decodeInto(data, rv, "", &failures) || len(failures) == 0 {
		return nil, err
	}
	for _, f := range failures {
		if f.Path == "apiVersion" || f.Path == "kind" || f.Path == "metadata" || strings.HasPrefix(f.Path, "metadata.") {
			return nil, err
		}
	}
	return failures, nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// decodeInto decodes raw into the struct rv field by field; false when raw
// is not a JSON object at all.
func decodeInto(raw []byte, rv reflect.Value, path string, failures *[]DecodeFailure) bool {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return false
	}
	decodeFields(fields, rv, path, failures)
	return true
}

func decodeFields(fields map[string]json.RawMessage, rv reflect.Value, path string, failures *[]DecodeFailure) {
	t := rv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, inline := jsonName(f)
		switch {
		case name == "-":
			continue
		case inline && f.Type.Kind() == reflect.Struct:
			decodeFields(fields, rv.Field(i), path, failures)
			continue
		}
		raw, ok := fields[name]
		if !ok {
			continue
		}
		decodeValue(raw, rv.Field(i), join(path, name), failures)
	}
}

// decodeValue sets fv from raw, or descends into it when it is a struct, a
// slice or a map of values that decode field by field, so the failure names
// the leaf; a leaf that fails stays zero and is recorded.
func decodeValue(raw []byte, fv reflect.Value, path string, failures *[]DecodeFailure) {
	ptr := reflect.New(fv.Type())
	err := kjson.UnmarshalCaseSensitivePreserveInts(raw, ptr.Interface())
	if err == nil {
		fv.Set(ptr.Elem())
		return
	}
	t := fv.Type()
	switch {
	case t.Kind() == reflect.Pointer && descends(t.Elem()):
		elem := reflect.New(t.Elem())
		if decodeInto(raw, elem.Elem(), path, failures) {
			fv.Set(elem)
			return
		}
	case t.Kind() == reflect.Struct && descends(t):
		if decodeInto(raw, fv, path, failures) {
			return
		}
	case t.Kind() == reflect.Slice:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			s := reflect.MakeSlice(t, len(items), len(items))
			for j, item := range items {
				decodeValue(item, s.Index(j), path+"["+strconv.Itoa(j)+"]", failures)
			}
			fv.Set(s)
			return
		}
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		var items map[string]json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			m := reflect.MakeMapWithSize(t, len(items))
			for k, item := range items {
				e := reflect.New(t.Elem()).Elem()
				decodeValue(item, e, join(path, k), failures)
				m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), e)
			}
			fv.Set(m)
			return
		}
	}
	*failures = append(*failures, DecodeFailure{Path: path, Error: err.Error(), Hint: hint(t)})
}

// descends: a struct decoded by the json package field by field, so its
// failing field can be told apart from its good ones.
func descends(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType)
}

// jsonName is the field's JSON name, and whether it is inlined (embedded
// without a name of its own, like TypeMeta).
func jsonName(f reflect.StructField) (string, bool) {
	name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch {
	case name == "-" && opts == "":
		return "-", false
	case name != "":
		return name, false
	case f.Anonymous:
		return "", true
	}
	return f.Name, false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// hint says what a leaf of type t accepts, for the types whose refusals
// an upgrade brings: durations, quantities and bounded integers.
func hint(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case reflect.TypeFor[metav1.Duration]():
		return `a duration such as "72h" or "90m"`
	case reflect.TypeFor[resource.Quantity]():
		return `a quantity such as "4Gi" or "500m"`
	case reflect.TypeFor[metav1.Time]():
		return "an RFC 3339 time such as 2026-01-02T15:04:05Z"
	}
	switch t.Kind() {
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		return "a whole number that fits in " + t.Kind().String()
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return "a non-negative whole number that fits in " + t.Kind().String()
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return ""
}
