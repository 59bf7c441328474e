package pii

import (
	"fmt"
	"strconv"
	"strings"
)

// Type names a kind of entity. Its upper-case form, with '-' as '_', names it in masks and placeholders.
type Type string

// The entity types, in the order Types lists them.
const (
	Email  Type = "email"
	Phone  Type = "phone"
	CNID   Type = "cn-id"
	Card   Type = "card"
	IBAN   Type = "iban"
	SSN    Type = "ssn"
	IP     Type = "ip"
	Secret Type = "secret"
)

var allTypes = []Type{Email, Phone, CNID, Card, IBAN, SSN, IP, Secret}

// Types lists every entity type.
func Types() []Type { return append([]Type(nil), allTypes...) }

// Valid reports whether t is one of Types.
func (t Type) Valid() bool { return t.bit() != 0 }

// upper is the type's name in masks and placeholders.
func (t Type) upper() string {
	switch t {
	case CNID:
		return "CN_ID"
	default:
		return strings.ToUpper(string(t))
	}
}

// mask is a set of types, one bit per entry of allTypes.
type mask uint16

const (
	bitEmail mask = 1 << iota
	bitPhone
	bitCNID
	bitCard
	bitIBAN
	bitSSN
	bitIP
	bitSecret
)

// bit is the type's flag in a mask of types; 0 for an unknown type.
func (t Type) bit() mask {
	switch t {
	case Email:
		return bitEmail
	case Phone:
		return bitPhone
	case CNID:
		return bitCNID
	case Card:
		return bitCard
	case IBAN:
		return bitIBAN
	case SSN:
		return bitSSN
	case IP:
		return bitIP
	case Secret:
		return bitSecret
	}
	return 0
}

func maskOf(types []Type) mask {
	if len(types) == 0 {
		return 1<<len(allTypes) - 1
	}
	var m mask
	for _, t := range types {
		m |= t.bit()
	}
	return m
}

// ParseTypes reads a comma-separated list of type names ("email,phone"); spaces around a name are ignored and
// duplicates are dropped. An empty list or an unknown name is an error naming it.
func ParseTypes(s string) ([]Type, error) {
	var out []Type
	var seen mask
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		t := Type(f)
		if !t.Valid() {
			return nil, fmt.Errorf("%w: %q (known: %s)", ErrUnknownType, f, typeList())
		}
		if seen&t.bit() == 0 {
			seen |= t.bit()
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the list %q names none (known: %s)", ErrUnknownType, s, typeList())
	}
	return out, nil
}

func typeList() string {
	names := make([]string, len(allTypes))
	for i, t := range allTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// Mask is what the mask action writes in place of an entity: "[EMAIL]", "[CN_ID]".
func Mask(t Type) string { return "[" + t.upper() + "]" }

// Placeholder is the n-th placeholder of a type, as a Tokenizer would number it: "<EMAIL_1>", "<CN_ID_2>".
func Placeholder(t Type, n int) string { return "<" + t.upper() + "_" + strconv.Itoa(n) + ">" }
