package expr

import (
	"reflect"
	"strings"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// headerMap is the `headers` variable: a CEL map(string, string) over the
// message's header map, holding the first value of each header, built
// without copying. A lookup tries the name as given and then any spelling
// that differs only in case; iteration yields the names as stored.
//
// It is a single pointer, so storing it in an interface does not allocate.
type headerMap struct {
	h map[string][]string
}

var (
	_ traits.Mapper   = headerMap{}
	_ traits.Foldable = headerMap{}
)

func (m headerMap) lookup(name string) (string, bool) {
	if vs, ok := m.h[name]; ok && len(vs) > 0 {
		return vs[0], true
	}
	for k, vs := range m.h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			return vs[0], true
		}
	}
	return "", false
}

// Find implements traits.Mapper.
func (m headerMap) Find(key ref.Val) (ref.Val, bool) {
	switch k := key.(type) {
	case types.String:
		v, ok := m.lookup(string(k))
		if !ok {
			return nil, false
		}
		return types.String(v), true
	case *types.Err, *types.Unknown:
		return key, false
	}
	return nil, false
}

// Get implements traits.Indexer.
func (m headerMap) Get(key ref.Val) ref.Val {
	v, ok := m.Find(key)
	if !ok {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

// Contains implements traits.Container: header presence.
func (m headerMap) Contains(key ref.Val) ref.Val {
	v, ok := m.Find(key)
	if !ok && v != nil {
		return v
	}
	return types.Bool(ok)
}

// Size implements traits.Sizer.
func (m headerMap) Size() ref.Val {
	n := 0
	for _, vs := range m.h {
		if len(vs) > 0 {
			n++
		}
	}
	return types.Int(n)
}

// Fold implements traits.Foldable.
func (m headerMap) Fold(f traits.Folder) {
	for k, vs := range m.h {
		if len(vs) > 0 && !f.FoldEntry(types.String(k), types.String(vs[0])) {
			return
		}
	}
}

// Iterator implements traits.Iterable: the header names.
func (m headerMap) Iterator() traits.Iterator {
	keys := make([]string, 0, len(m.h))
	for k, vs := range m.h {
		if len(vs) > 0 {
			keys = append(keys, k)
		}
	}
	return types.NewStringList(types.DefaultTypeAdapter, keys).Iterator()
}

func (m headerMap) Equal(other ref.Val) ref.Val { return mapEqual(m, other) }
func (m headerMap) Type() ref.Type              { return types.MapType }
func (m headerMap) Value() any                  { return m.native() }

func (m headerMap) native() map[string]string {
	out := make(map[string]string, len(m.h))
	for k, vs := range m.h {
		if len(vs) > 0 {
			out[k] = vs[0]
		}
	}
	return out
}

func (m headerMap) ConvertToNative(t reflect.Type) (any, error) {
	return types.DefaultTypeAdapter.NativeToValue(m.native()).ConvertToNative(t)
}

func (m headerMap) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return m
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", types.MapType, t)
}
