package expr

import (
	"errors"
	"reflect"
	"strconv"
	"strings"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/tidwall/gjson"
)

// The payload variable is a lazy view of the message body: an object or
// array is a jsonObject or jsonList over its raw text, and a member or
// element is converted to a CEL value only when an expression reaches it
// (nested objects and arrays again as lazy views). Reading two fields of a
// large payload costs a scan up to those fields and nothing else. Numbers
// are doubles, as in CEL's own JSON mapping (google.protobuf.Value).
//
// Values refer to the raw text, which refers to Message.Data without a copy.

// payloadValue returns the CEL value of a whole payload, whether it is
// JSON, and the budget of the evaluation from now on. A payload that is not
// JSON (empty, text, binary) is null. Objects and arrays are not validated
// here; a malformed one is seen as far as it makes sense, and a damaged
// member reads as an error or as absent.
//
// The views charge b for the strings they unescape and the values they
// decode. A view may outlive the evaluation (Eval returns it), so an object
// or array gets a budget of its own, allocated with it, carrying on from b;
// b may be nil (no limit).
func payloadValue(s string, b *budget) (ref.Val, bool, *budget) {
	i := skipWS(s, 0)
	if i == len(s) {
		return types.NullValue, false, b
	}
	j := len(s)
	for j > i {
		switch s[j-1] {
		case ' ', '\t', '\n', '\r':
			j--
			continue
		}
		break
	}
	s = s[i:j]
	switch s[0] {
	case '{':
		if s[len(s)-1] != '}' {
			return types.NullValue, false, b
		}
		r := &rootObject{jsonObject: jsonObject{raw: s, size: -1}}
		if b != nil {
			r.own = *b
			r.b = &r.own
		}
		return &r.jsonObject, true, r.b
	case '[':
		if s[len(s)-1] != ']' {
			return types.NullValue, false, b
		}
		r := &rootList{jsonList: jsonList{raw: s, size: -1}}
		if b != nil {
			r.own = *b
			r.b = &r.own
		}
		return &r.jsonList, true, r.b
	}
	if skipValue(s, 0) != len(s) {
		return types.NullValue, false, b
	}
	v := jsonValue(s, b)
	if types.IsError(v) {
		return types.NullValue, false, b
	}
	return v, true, b
}

// rootObject and rootList are the payload's view allocated with its budget.
type rootObject struct {
	jsonObject
	own budget
}

type rootList struct {
	jsonList
	own budget
}

// jsonValue converts the raw text of one JSON value. A string with escapes
// is unescaped into a copy, charged to b.
func jsonValue(raw string, b *budget) ref.Val {
	if raw == "" {
		return types.NewErr("payload: empty JSON value")
	}
	switch c := raw[0]; c {
	case '{':
		return &jsonObject{raw: raw, size: -1, b: b}
	case '[':
		return &jsonList{raw: raw, size: -1, b: b}
	case '"':
		if len(raw) >= 2 && raw[len(raw)-1] == '"' {
			inner := raw[1 : len(raw)-1]
			if strings.IndexByte(inner, '\\') < 0 {
				return types.String(inner)
			}
			if err := b.charge(int64(len(inner)), "reading a payload string"); err != nil {
				return err
			}
			return types.String(gjson.Parse(raw).Str)
		}
	case 't':
		if raw == "true" {
			return types.True
		}
	case 'f':
		if raw == "false" {
			return types.False
		}
	case 'n':
		if raw == "null" {
			return types.NullValue
		}
	default:
		if c == '-' || c >= '0' && c <= '9' {
			f, err := strconv.ParseFloat(raw, 64)
			if err == nil || errors.Is(err, strconv.ErrRange) {
				return types.Double(f)
			}
		}
	}
	return types.NewErr("payload: malformed JSON value %q", clip(raw))
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// keyIs reports whether the quoted, possibly escaped, raw key equals key.
// An escape is always longer than the character it stands for, so a raw key
// of the same length matches only byte for byte, and a shorter one never.
func keyIs(quoted, key string) bool {
	inner := quoted[1 : len(quoted)-1]
	switch {
	case len(inner) == len(key):
		return inner == key
	case len(inner) < len(key):
		return false
	}
	return strings.IndexByte(inner, '\\') >= 0 && gjson.Parse(quoted).Str == key
}

func unescapeKey(quoted string) string {
	inner := quoted[1 : len(quoted)-1]
	if strings.IndexByte(inner, '\\') < 0 {
		return inner
	}
	return gjson.Parse(quoted).Str
}

// materialize decodes raw completely into standard CEL values. Only the rare
// operations that need a whole value (conversion to Go, list concatenation)
// use it.
func materialize(raw string) ref.Val {
	return types.DefaultTypeAdapter.NativeToValue(gjson.Parse(raw).Value())
}

// jsonObject is a lazy JSON object: a CEL map(string, dyn).
type jsonObject struct {
	raw  string
	size int     // -1 until counted
	b    *budget // of the evaluation that made the view; nil: no limit
}

var (
	_ traits.Mapper   = (*jsonObject)(nil)
	_ traits.Foldable = (*jsonObject)(nil)
	_ traits.Lister   = (*jsonList)(nil)
	_ traits.Foldable = (*jsonList)(nil)
)

func (o *jsonObject) find(key string) (string, bool) {
	it := objectIter{s: o.raw}
	for {
		k, v, ok := it.next()
		if !ok {
			return "", false
		}
		if keyIs(k, key) {
			return v, true
		}
	}
}

// Find implements traits.Mapper.
func (o *jsonObject) Find(key ref.Val) (ref.Val, bool) {
	switch k := key.(type) {
	case types.String:
		raw, ok := o.find(string(k))
		if !ok {
			return nil, false
		}
		return jsonValue(raw, o.b), true
	case *types.Err, *types.Unknown:
		return key, false
	}
	return nil, false
}

// Get implements traits.Indexer.
func (o *jsonObject) Get(key ref.Val) ref.Val {
	v, ok := o.Find(key)
	if !ok {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

// Contains implements traits.Container: key presence.
func (o *jsonObject) Contains(key ref.Val) ref.Val {
	v, ok := o.Find(key)
	if !ok && v != nil {
		return v
	}
	return types.Bool(ok)
}

// Size implements traits.Sizer.
func (o *jsonObject) Size() ref.Val {
	if o.size < 0 {
		n := 0
		it := objectIter{s: o.raw}
		for {
			if _, _, ok := it.next(); !ok {
				break
			}
			n++
		}
		o.size = n
	}
	return types.Int(o.size)
}

// Fold implements traits.Foldable: key, value pairs in document order.
func (o *jsonObject) Fold(f traits.Folder) {
	it := objectIter{s: o.raw}
	for {
		k, v, ok := it.next()
		if !ok || !f.FoldEntry(types.String(unescapeKey(k)), jsonValue(v, o.b)) {
			return
		}
	}
}

// Iterator implements traits.Iterable: the keys in document order.
func (o *jsonObject) Iterator() traits.Iterator {
	return &jsonIterator{obj: objectIter{s: o.raw}, isObj: true, b: o.b}
}

func (o *jsonObject) Equal(other ref.Val) ref.Val { return mapEqual(o, other) }
func (o *jsonObject) Type() ref.Type              { return types.MapType }
func (o *jsonObject) Value() any                  { return gjson.Parse(o.raw).Value() }
func (o *jsonObject) String() string              { return o.raw }

func (o *jsonObject) ConvertToNative(t reflect.Type) (any, error) {
	return materialize(o.raw).ConvertToNative(t)
}

func (o *jsonObject) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return o
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", types.MapType, t)
}

// jsonList is a lazy JSON array: a CEL list(dyn).
type jsonList struct {
	raw  string
	size int     // -1 until counted
	b    *budget // of the evaluation that made the view; nil: no limit
}

// Get implements traits.Indexer.
func (l *jsonList) Get(index ref.Val) ref.Val {
	i, err := types.GetOrError(index)
	if err != nil {
		return types.ValOrErr(index, "%v", err)
	}
	if i >= 0 {
		it := arrayIter{s: l.raw}
		for n := 0; ; n++ {
			v, ok := it.next()
			if !ok {
				break
			}
			if n == i {
				return jsonValue(v, l.b)
			}
		}
	}
	return types.NewErr("index '%d' out of range in list size '%d'", i, l.Size())
}

// Size implements traits.Sizer.
func (l *jsonList) Size() ref.Val {
	if l.size < 0 {
		n := 0
		it := arrayIter{s: l.raw}
		for {
			if _, ok := it.next(); !ok {
				break
			}
			n++
		}
		l.size = n
	}
	return types.Int(l.size)
}

// Contains implements traits.Container: `x in list`.
func (l *jsonList) Contains(elem ref.Val) ref.Val {
	if types.IsUnknownOrError(elem) {
		return elem
	}
	it := arrayIter{s: l.raw}
	for {
		v, ok := it.next()
		if !ok {
			return types.False
		}
		if types.Equal(jsonValue(v, l.b), elem) == types.True {
			return types.True
		}
	}
}

// Add implements traits.Adder (list concatenation) on a decoded copy.
// Within an evaluation the concatenation was charged by its boundedCall.
func (l *jsonList) Add(other ref.Val) ref.Val {
	return materialize(l.raw).(traits.Lister).Add(other)
}

// Fold implements traits.Foldable: index, element pairs in order.
func (l *jsonList) Fold(f traits.Folder) {
	it := arrayIter{s: l.raw}
	for i := 0; ; i++ {
		v, ok := it.next()
		if !ok || !f.FoldEntry(types.Int(i), jsonValue(v, l.b)) {
			return
		}
	}
}

// Iterator implements traits.Iterable.
func (l *jsonList) Iterator() traits.Iterator {
	return &jsonIterator{arr: arrayIter{s: l.raw}, b: l.b}
}

func (l *jsonList) Equal(other ref.Val) ref.Val { return listEqual(l, other) }
func (l *jsonList) Type() ref.Type              { return types.ListType }
func (l *jsonList) Value() any                  { return gjson.Parse(l.raw).Value() }
func (l *jsonList) String() string              { return l.raw }

func (l *jsonList) ConvertToNative(t reflect.Type) (any, error) {
	return materialize(l.raw).ConvertToNative(t)
}

func (l *jsonList) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.ListType:
		return l
	case types.TypeType:
		return types.ListType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", types.ListType, t)
}

// jsonIterator yields the keys of an object or the elements of an array.
// The scanner cannot tell whether another item follows without reading it,
// so the iterator reads one ahead.
type jsonIterator struct {
	obj    objectIter
	arr    arrayIter
	isObj  bool
	primed bool
	ok     bool
	next   string
	b      *budget
}

func (it *jsonIterator) prime() {
	if it.primed {
		return
	}
	it.primed = true
	if it.isObj {
		var k string
		k, _, it.ok = it.obj.next()
		if it.ok {
			it.next = unescapeKey(k)
		}
		return
	}
	it.next, it.ok = it.arr.next()
}

func (it *jsonIterator) HasNext() ref.Val {
	it.prime()
	return types.Bool(it.ok)
}

func (it *jsonIterator) Next() ref.Val {
	it.prime()
	if !it.ok {
		return types.NewErr("iterator: no more elements")
	}
	it.primed = false
	if it.isObj {
		return types.String(it.next)
	}
	return jsonValue(it.next, it.b)
}

func (it *jsonIterator) ConvertToNative(reflect.Type) (any, error) {
	return nil, errors.New("type conversion on iterators not supported")
}
func (it *jsonIterator) ConvertToType(ref.Type) ref.Val {
	return types.NewErr("no such overload")
}
func (it *jsonIterator) Equal(ref.Val) ref.Val { return types.NewErr("no such overload") }
func (it *jsonIterator) Type() ref.Type        { return types.IteratorType }
func (it *jsonIterator) Value() any            { return nil }

// mapEqual is CEL map equality for the lazy maps, as the standard maps do it.
func mapEqual(m traits.Mapper, other ref.Val) ref.Val {
	o, ok := other.(traits.Mapper)
	if !ok {
		return types.False
	}
	if m.Size() != o.Size() {
		return types.False
	}
	it := m.Iterator()
	for it.HasNext() == types.True {
		k := it.Next()
		v, _ := m.Find(k)
		ov, found := o.Find(k)
		if !found || types.Equal(v, ov) != types.True {
			return types.False
		}
	}
	return types.True
}

// listEqual is CEL list equality for the lazy lists.
func listEqual(l traits.Lister, other ref.Val) ref.Val {
	o, ok := other.(traits.Lister)
	if !ok {
		return types.False
	}
	if l.Size() != o.Size() {
		return types.False
	}
	i := types.Int(0)
	it := l.Iterator()
	for it.HasNext() == types.True {
		if types.Equal(it.Next(), o.Get(i)) != types.True {
			return types.False
		}
		i++
	}
	return types.True
}
