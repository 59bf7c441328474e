package plugin

// A few bytes of WebAssembly, written by hand, for the checks Load makes before a module runs: they need no go
// tool and show exactly what each check refuses.

type wasmFunc struct {
	name            string // export name
	params, results []byte // value types: i32 0x7f, i64 0x7e
	body            []byte // instructions, without the final end
}

const (
	i32 = 0x7f
	i64 = 0x7e
)

func constI32(v byte) []byte { return []byte{0x41, v} } // v < 64, so one LEB byte
func constI64(v byte) []byte { return []byte{0x42, v} }

// wasmModule builds a module that imports the functions named (module, name) with no parameters, defines fns,
// and exports one page of memory as "memory".
func wasmModule(imports [][2]string, fns []wasmFunc) []byte {
	var types, imps, funcs, exps, code []byte
	ntypes := 0
	addType := func(params, results []byte) byte {
		types = append(types, 0x60, byte(len(params)))
		types = append(types, params...)
		types = append(types, byte(len(results)))
		types = append(types, results...)
		ntypes++
		return byte(ntypes - 1)
	}
	name := func(b []byte, s string) []byte { return append(append(b, byte(len(s))), s...) }
	for _, imp := range imports {
		t := addType(nil, nil)
		imps = name(name(imps, imp[0]), imp[1])
		imps = append(imps, 0x00, t)
	}
	for i, f := range fns {
		funcs = append(funcs, addType(f.params, f.results))
		exps = name(exps, f.name)
		exps = append(exps, 0x00, byte(len(imports)+i))
		body := append(append([]byte{0x00}, f.body...), 0x0b) // no locals
		code = append(append(code, byte(len(body))), body...)
	}
	exps = name(exps, "memory")
	exps = append(exps, 0x02, 0x00)

	section := func(out []byte, id byte, count int, content []byte) []byte {
		if count == 0 {
			return out
		}
		payload := append([]byte{byte(count)}, content...)
		return append(append(out, id, byte(len(payload))), payload...)
	}
	m := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	m = section(m, 1, ntypes, types)
	m = section(m, 2, len(imports), imps)
	m = section(m, 3, len(fns), funcs)
	m = section(m, 5, 1, []byte{0x00, 0x01}) // one memory of at least one page
	m = section(m, 7, len(fns)+1, exps)
	m = section(m, 10, len(fns), code)
	return m
}

// rawPlugin returns the functions of a minimal ingress plugin: version v, an alloc that hands out address 0, and an
// ingress stage that always passes.
func rawPlugin(v byte) []wasmFunc {
	return []wasmFunc{
		{name: "semaq_abi_version", results: []byte{i32}, body: constI32(v)},
		{name: "semaq_alloc", params: []byte{i32}, results: []byte{i32}, body: constI32(0)},
		{name: "semaq_ingress", params: []byte{i32, i32}, results: []byte{i64}, body: constI64(0)},
	}
}

func without(fns []wasmFunc, name string) []wasmFunc {
	var out []wasmFunc
	for _, f := range fns {
		if f.name != name {
			out = append(out, f)
		}
	}
	return out
}
