package pii

import (
	"github.com/nyaruka/phonenumbers"
)

func phoneDetectors() []detector {
	return []detector{
		{
			// International: '+', a country code, then digit groups split by one space, dash, dot or a
			// parenthesised area code.
			Detector: Detector{
				Type:     Phone,
				Pattern:  `\+\d{1,3}(?:[ .\-]?(?:\(\d{1,5}\)|\d{1,6})){0,5}[ .\-]?\d{1,6}\b`,
				Validate: validPhone,
				MaxLen:   32,
			},
			costly: budgetPhone,
			seed:   digitsSeed(7, 4, 0),
			refine: true,
			ctx:    numberCtx,
		},
		{
			// Chinese mobile: 1[3-9] and nine more digits, bare or as 3-4-4, optionally after +86 or 0086.
			Detector: Detector{
				Type:     Phone,
				Pattern:  `(?:\+86[ \-]?|\b0086[ \-]?|\b)1[3-9]\d(?:[ \-]?\d{4}){2}\b`,
				Validate: validPhone,
				MaxLen:   20,
			},
			costly: budgetPhone,
			seed:   digitsSeed(11, 5, 0),
			refine: true,
			ctx:    numberCtx,
		},
	}
}

// validPhone checks a phone number in one of the two shapes SemaQ looks for, and nothing else, for precision
// on order numbers, dates, versions and prices:
//   - international: '+' and a country code, which libphonenumber's metadata (github.com/nyaruka/phonenumbers)
//     must find a valid number for;
//   - Chinese mobile: 1[3-9] and nine more digits, together or as 3-4-4 with one space or dash, optionally after
//     +86 or 0086, valid for region CN.
//
// National formats of other countries ("(415) 555-2671") are not looked for: without a country code they cannot
// be told from other numbers well enough.
func validPhone(s string) bool { return budgetPhone(nil, s) }

// budgetPhone checks the shape of s, and then asks libphonenumber while the scan sc (nil for no limit) has
// checks left, or else only whether the country code is known and the number has a plausible length.
func budgetPhone(sc *scan, s string) bool {
	if len(s) < 8 || len(s) > 32 {
		return false
	}
	var digits [20]byte
	n := 0
	depth := 0
	var sep byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isDigit(c):
			if n == len(digits) {
				return false
			}
			digits[n] = c
			n++
		case c == '+':
			if i != 0 {
				return false
			}
		case c == '(':
			depth++
			if depth > 1 {
				return false
			}
		case c == ')':
			depth--
			if depth < 0 {
				return false
			}
		case c == ' ' || c == '-' || c == '.':
			if sep != 0 && c != sep && c != ' ' && sep != ' ' { // "+1 415-555" mixes a space with one other
				return false
			}
			if c != ' ' {
				sep = c
			}
		default:
			return false
		}
	}
	if depth != 0 || !isDigit(s[len(s)-1]) {
		return false
	}
	lib := sc == nil || sc.lib > 0
	if sc != nil && lib {
		sc.lib--
	}
	d := string(digits[:n])
	switch {
	case s[0] == '+':
	case len(d) == 15 && d[:4] == "0086":
		d = "+" + d[2:]
	case len(d) == 11 && d[0] == '1' && d[1] >= '3':
		return !lib || cnMobile(d)
	default:
		return false
	}
	if d[0] != '+' {
		d = "+" + d
	}
	if len(d) == 14 && d[:3] == "+86" && d[3] == '1' {
		return !lib || cnMobile(d[3:])
	}
	if !lib {
		return plausiblePhone(d)
	}
	num, err := phonenumbers.Parse(d, "")
	return err == nil && phonenumbers.IsValidNumber(num)
}

func cnMobile(d string) bool {
	if len(d) != 11 || d[0] != '1' || d[1] < '3' {
		return false
	}
	num, err := phonenumbers.Parse(d, "CN")
	return err == nil && phonenumbers.IsValidNumber(num) &&
		phonenumbers.GetNumberType(num) == phonenumbers.MOBILE
}

// plausiblePhone reports whether an E.164 number ("+" and digits) starts with a country code libphonenumber
// knows and has a national number of 4 to 14 digits.
func plausiblePhone(d string) bool {
	cc := 0
	for i := 1; i <= 3 && i < len(d); i++ {
		cc = cc*10 + int(d[i]-'0')
		if phonenumbers.GetRegionCodeForCountryCode(cc) != "ZZ" {
			n := len(d) - 1 - i
			return n >= 4 && n <= 14
		}
	}
	return false
}
