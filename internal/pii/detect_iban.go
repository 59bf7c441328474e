package pii

func ibanDetectors() []detector {
	return []detector{{
		Detector: Detector{
			Type:     IBAN,
			Pattern:  `\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b`,
			Validate: validIBAN,
			MaxLen:   34 + 8,
		},
		seed:   ibanSeed,
		refine: true,
		ctx:    numberCtx,
	}}
}

// ibanLengths is the length of an IBAN in each country that issues them (the SWIFT IBAN registry).
var ibanLengths = map[string]int{
	"AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
	"BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
	"EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
	"GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
	"IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21,
	"LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28,
	"NL": 18, "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22,
	"RU": 33, "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25,
	"SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}

// validIBAN checks an IBAN: upper-case, written together or in groups of 4 split by single spaces (the last
// group shorter), the length its country uses, and the ISO 13616 check: the number mod 97 is 1.
func validIBAN(s string) bool {
	var b [34]byte
	n := 0
	group := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ':
			if group != 4 || i+1 == len(s) {
				return false
			}
			group = 0
			continue
		case isDigit(c) || isUpper(c):
		default:
			return false
		}
		if n == len(b) {
			return false
		}
		b[n] = c
		n++
		group++
	}
	if n < 15 || !isUpper(b[0]) || !isUpper(b[1]) || !isDigit(b[2]) || !isDigit(b[3]) {
		return false
	}
	if ibanLengths[string(b[:2])] != n {
		return false
	}
	// The check moves the first four characters to the end and reads letters as 10..35.
	rem := 0
	for i := 0; i < n; i++ {
		c := b[(i+4)%n]
		if isDigit(c) {
			rem = (rem*10 + int(c-'0')) % 97
		} else {
			rem = (rem*100 + int(c-'A') + 10) % 97
		}
	}
	return rem == 1
}
