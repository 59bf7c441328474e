package avrofmt

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hamba/avro/v2"

	"github.com/semaq/semaq/internal/schema"
)

// Payload validation walks the binary encoding against a tree compiled from
// the parsed schema instead of calling hamba's Unmarshal into a generic
// value. hamba sizes a []any from an array's claimed item count before
// reading an item, and an array of nulls or empty records can claim
// millions of items in a few bytes, so its MaxSliceAllocSize bound still
// lets a small hostile payload allocate hundreds of megabytes per nested
// array. The walker allocates nothing on the success path, checks every
// length against the bytes actually left, knows the field path it is at,
// and sees where the datum ends, so trailing bytes are caught. Tests check
// it against hamba on valid data.

const (
	// avroMaxDepth bounds nesting (records, arrays, maps, unions), so a
	// recursive schema cannot drive the walker's stack without limit.
	avroMaxDepth = 1000
	// avroMaxEmptyItems bounds, per payload, the array items whose type
	// encodes as zero bytes (null, empty records): their count is not
	// limited by the payload's length.
	avroMaxEmptyItems = 1 << 20
	// avroMinCap saturates the minimum-size sums of huge fixed types.
	avroMinCap = 1 << 30
)

type avroKind uint8

const (
	avroNull avroKind = iota
	avroBoolean
	avroInt
	avroLong
	avroFloat
	avroDouble
	avroBytes
	avroString
	avroRecord
	avroEnum
	avroArray
	avroMap
	avroUnion
	avroFixed
)

// avroNode is one type of the compiled schema. Named types are shared, so
// a recursive schema compiles to a cyclic graph.
type avroNode struct {
	kind     avroKind
	fields   []avroNodeField // record
	elem     *avroNode       // array items, map values
	branches []*avroNode     // union
	n        int             // enum symbol count, fixed size
	min      int             // a lower bound on the bytes one value takes
}

type avroNodeField struct {
	name string
	node *avroNode
}

// avroCompile turns a hamba schema into the walker's tree.
func avroCompile(s avro.Schema) *avroNode {
	return (&avroCompiler{named: make(map[string]*avroNode)}).node(s)
}

type avroCompiler struct {
	named map[string]*avroNode
}

func (c *avroCompiler) node(s avro.Schema) *avroNode {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if named, ok := s.(avro.NamedSchema); ok {
		if n := c.named[named.FullName()]; n != nil {
			// Seen, or being compiled (recursion): while in progress its
			// min is 0, which keeps every min a lower bound.
			return n
		}
	}
	switch s := s.(type) {
	case *avro.RecordSchema:
		n := &avroNode{kind: avroRecord, fields: make([]avroNodeField, len(s.Fields()))}
		c.named[s.FullName()] = n
		for i, f := range s.Fields() {
			n.fields[i] = avroNodeField{name: f.Name(), node: c.node(f.Type())}
		}
		for _, f := range n.fields {
			n.min = min(n.min+f.node.min, avroMinCap)
		}
		return n
	case *avro.EnumSchema:
		n := &avroNode{kind: avroEnum, n: len(s.Symbols()), min: 1}
		c.named[s.FullName()] = n
		return n
	case *avro.FixedSchema:
		n := &avroNode{kind: avroFixed, n: s.Size(), min: min(s.Size(), avroMinCap)}
		c.named[s.FullName()] = n
		return n
	case *avro.ArraySchema:
		return &avroNode{kind: avroArray, elem: c.node(s.Items()), min: 1}
	case *avro.MapSchema:
		return &avroNode{kind: avroMap, elem: c.node(s.Values()), min: 1}
	case *avro.UnionSchema:
		n := &avroNode{kind: avroUnion, min: 1}
		for _, b := range s.Types() {
			n.branches = append(n.branches, c.node(b))
		}
		return n
	}
	switch s.Type() {
	case avro.Boolean:
		return &avroNode{kind: avroBoolean, min: 1}
	case avro.Int:
		return &avroNode{kind: avroInt, min: 1}
	case avro.Long:
		return &avroNode{kind: avroLong, min: 1}
	case avro.Float:
		return &avroNode{kind: avroFloat, min: 4}
	case avro.Double:
		return &avroNode{kind: avroDouble, min: 8}
	case avro.Bytes:
		return &avroNode{kind: avroBytes, min: 1}
	case avro.String:
		return &avroNode{kind: avroString, min: 1}
	}
	return &avroNode{kind: avroNull}
}

// avroValidate decodes one datum and requires every byte to be consumed.
func avroValidate(root *avroNode, payload []byte) error {
	d := avroDecoder{buf: payload, empty: avroMaxEmptyItems}
	if err := d.value(root); err != nil {
		return &schema.ValidationError{Path: err.pathString(), Rule: "decode", Message: err.msg}
	}
	if d.pos != len(payload) {
		return &schema.ValidationError{
			Rule:    "trailing-bytes",
			Message: fmt.Sprintf("the datum ends at byte %d but the payload has %d bytes", d.pos, len(payload)),
		}
	}
	return nil
}

type avroDecoder struct {
	buf   []byte
	pos   int
	depth int
	empty int // zero-byte array items still allowed
}

// avroDecodeError is a decode failure; path collects the location's
// segments innermost first as the walk unwinds.
type avroDecodeError struct {
	msg  string
	path []string
}

func (e *avroDecodeError) pathString() string {
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		seg := e.path[i]
		if b.Len() == 0 {
			seg = strings.TrimPrefix(seg, ".")
		}
		b.WriteString(seg)
	}
	return b.String()
}

func (e *avroDecodeError) in(seg string) *avroDecodeError {
	e.path = append(e.path, seg)
	return e
}

func (d *avroDecoder) fail(at int, format string, args ...any) *avroDecodeError {
	return &avroDecodeError{msg: fmt.Sprintf("at byte %d: ", at) + fmt.Sprintf(format, args...)}
}

func (d *avroDecoder) value(n *avroNode) *avroDecodeError {
	switch n.kind {
	case avroNull:
		return nil
	case avroBoolean:
		if d.pos >= len(d.buf) {
			return d.fail(d.pos, "the payload ends before a boolean")
		}
		if b := d.buf[d.pos]; b > 1 {
			return d.fail(d.pos, "a boolean must be byte 0 or 1, not %d", b)
		}
		d.pos++
		return nil
	case avroInt:
		_, err := d.int()
		return err
	case avroLong:
		_, err := d.long()
		return err
	case avroFloat:
		return d.skip(4, "a float")
	case avroDouble:
		return d.skip(8, "a double")
	case avroBytes:
		_, _, err := d.bytes("bytes")
		return err
	case avroString:
		_, _, err := d.str()
		return err
	case avroEnum:
		at := d.pos
		i, err := d.int()
		if err != nil {
			return err
		}
		if i < 0 || int(i) >= n.n {
			return d.fail(at, "enum index %d is out of range (the enum has %d symbols)", i, n.n)
		}
		return nil
	case avroFixed:
		return d.skip(n.n, "a fixed")
	}

	if d.depth++; d.depth > avroMaxDepth {
		return d.fail(d.pos, "the datum nests deeper than %d levels", avroMaxDepth)
	}
	var err *avroDecodeError
	switch n.kind {
	case avroRecord:
		for i := range n.fields {
			f := &n.fields[i]
			if err = d.value(f.node); err != nil {
				err = err.in("." + f.name)
				break
			}
		}
	case avroArray, avroMap:
		err = d.blocks(n)
	case avroUnion:
		at := d.pos
		var i int64
		if i, err = d.long(); err == nil {
			if i < 0 || i >= int64(len(n.branches)) {
				err = d.fail(at, "union branch %d is out of range (the union has %d branches)", i, len(n.branches))
			} else {
				err = d.value(n.branches[i])
			}
		}
	}
	d.depth--
	return err
}

// blocks reads an array's or a map's blocks: a count, for a negative count
// also the block's size in bytes, then the items; a zero count ends.
func (d *avroDecoder) blocks(n *avroNode) *avroDecodeError {
	per := n.elem.min
	if n.kind == avroMap {
		per = min(per+1, avroMinCap) // the key's length
	}
	index := 0
	for {
		at := d.pos
		count, err := d.long()
		if err != nil {
			return err
		}
		if count == 0 {
			return nil
		}
		size, start := int64(-1), 0
		if count < 0 {
			if count == math.MinInt64 {
				return d.fail(at, "block count %d is invalid", count)
			}
			count = -count
			if size, err = d.long(); err != nil {
				return err
			}
			if size < 0 || size > int64(len(d.buf)-d.pos) {
				return d.fail(at, "block size %d does not fit in the %d bytes left", size, len(d.buf)-d.pos)
			}
			start = d.pos
		}
		if per > 0 {
			if count > int64((len(d.buf)-d.pos)/per) {
				return d.fail(at, "block claims %d items but only %d bytes are left", count, len(d.buf)-d.pos)
			}
		} else {
			if count > int64(d.empty) {
				return d.fail(at, "more than %d items that encode as zero bytes", avroMaxEmptyItems)
			}
			d.empty -= int(count)
		}
		for j := int64(0); j < count; j++ {
			if n.kind == avroArray {
				if err := d.value(n.elem); err != nil {
					return err.in("[" + strconv.Itoa(index) + "]")
				}
			} else {
				ks, ke, err := d.str()
				if err != nil {
					return err.in("[" + strconv.Itoa(index) + "]")
				}
				if err := d.value(n.elem); err != nil {
					return err.in("[" + strconv.Quote(string(d.buf[ks:ke])) + "]")
				}
			}
			index++
		}
		if size >= 0 && int64(d.pos-start) != size {
			return d.fail(at, "block size says %d bytes but its items take %d", size, d.pos-start)
		}
	}
}

func (d *avroDecoder) skip(n int, what string) *avroDecodeError {
	if n > len(d.buf)-d.pos {
		return d.fail(d.pos, "%s needs %d bytes but only %d are left", what, n, len(d.buf)-d.pos)
	}
	d.pos += n
	return nil
}

// bytes reads a length-prefixed byte string and returns its bounds.
func (d *avroDecoder) bytes(what string) (start, end int, err *avroDecodeError) {
	at := d.pos
	n, err := d.long()
	if err != nil {
		return 0, 0, err
	}
	if n < 0 {
		return 0, 0, d.fail(at, "%s length %d is negative", what, n)
	}
	if n > int64(len(d.buf)-d.pos) {
		return 0, 0, d.fail(at, "%s length %d exceeds the %d bytes left", what, n, len(d.buf)-d.pos)
	}
	start = d.pos
	d.pos += int(n)
	return start, d.pos, nil
}

func (d *avroDecoder) str() (start, end int, err *avroDecodeError) {
	start, end, err = d.bytes("string")
	if err == nil && !utf8.Valid(d.buf[start:end]) {
		return 0, 0, d.fail(start, "the string is not valid UTF-8")
	}
	return start, end, err
}

func (d *avroDecoder) int() (int32, *avroDecodeError) {
	u, err := d.varint(5, 0x0f, "an int")
	return int32(uint32(u>>1) ^ -uint32(u&1)), err
}

func (d *avroDecoder) long() (int64, *avroDecodeError) {
	u, err := d.varint(10, 0x01, "a long")
	return int64(u>>1) ^ -int64(u&1), err
}

// varint reads a base-128 varint of at most limit bytes; the last byte may
// carry only the bits left of the 32 or 64 (last is its largest value).
func (d *avroDecoder) varint(limit int, last byte, what string) (uint64, *avroDecodeError) {
	at := d.pos
	var u uint64
	for i := 0; i < limit; i++ {
		if d.pos >= len(d.buf) {
			return 0, d.fail(at, "the payload ends inside %s", what)
		}
		b := d.buf[d.pos]
		d.pos++
		u |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			if i == limit-1 && b > last {
				return 0, d.fail(at, "%s overflows", what)
			}
			return u, nil
		}
	}
	return 0, d.fail(at, "%s is longer than %d bytes", what, limit)
}
