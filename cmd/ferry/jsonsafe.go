package main

import (
	"encoding"
	"encoding/json"
	"math"
	"reflect"
	"strings"
)

// jsonSafe converts v into plain maps, slices and values that encoding/json
// always encodes: a NaN or infinite float becomes null (a loss can be NaN,
// a hand-written profile can hold Inf) where encoding/json would fail the
// whole output. Field names, omitempty and embedding follow the json tags.
func jsonSafe(v any) any { return safeValue(reflect.ValueOf(v)) }

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

func safeValue(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	if v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		if v.Type().Implements(jsonMarshaler) || v.Type().Implements(textMarshaler) {
			return v.Interface()
		}
		return safeValue(v.Elem())
	}
	if v.Type().Implements(jsonMarshaler) || v.Type().Implements(textMarshaler) {
		return v.Interface()
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return v.Interface()
	case reflect.Struct:
		out := map[string]any{}
		safeStruct(v, out)
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := map[string]any{}
		it := v.MapRange()
		for it.Next() {
			k, _ := json.Marshal(it.Key().Interface())
			key := strings.Trim(string(k), `"`)
			out[key] = safeValue(it.Value())
		}
		return out
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = safeValue(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

func safeStruct(v reflect.Value, out map[string]any) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		if f.Anonymous && name == "" {
			inner := fv
			if inner.Kind() == reflect.Pointer {
				if inner.IsNil() {
					continue
				}
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct {
				safeStruct(inner, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.Contains(opts, "omitempty") && isEmpty(fv) {
			continue
		}
		out[name] = safeValue(fv)
	}
}

// isEmpty is encoding/json's notion of empty for omitempty.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Struct:
		return false
	}
	return v.IsZero()
}
