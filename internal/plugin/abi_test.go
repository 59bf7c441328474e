package plugin

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
)

func newRuntime(t *testing.T, cfg RuntimeConfig) *Runtime {
	t.Helper()
	rt, err := NewRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return rt
}

// TestRawModuleRuns shows the ABI needs no SDK: a module of a few hand-written bytes is a plugin.
func TestRawModuleRuns(t *testing.T) {
	rt := newRuntime(t, RuntimeConfig{})
	p, err := rt.Load(context.Background(), "raw", wasmModule(nil, rawPlugin(1)), []Stage{StageIngress}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Ingress(context.Background(), &Message{Subject: "a", Data: []byte("x")})
	if err != nil || res.Action != IngressPass {
		t.Fatalf("Ingress = %+v, %v; want pass", res, err)
	}
	if !p.Implements(StageIngress) || p.Implements(StageFilter) {
		t.Errorf("stages: ingress %v filter %v; want only ingress", p.Implements(StageIngress), p.Implements(StageFilter))
	}
	if _, err := p.Filter(context.Background(), &Message{Subject: "a"}); !errors.Is(err, ErrNoStage) {
		t.Errorf("Filter on an ingress-only plugin: %v, want ErrNoStage", err)
	}
}

// TestLoadRefusesNonPlugins: each module that is not a plugin of this ABI is refused before it can run a call,
// with an error naming what is wrong.
func TestLoadRefusesNonPlugins(t *testing.T) {
	rt := newRuntime(t, RuntimeConfig{})
	wrongSig := rawPlugin(1)
	wrongSig[2].results = []byte{i32}
	wrongSig[2].body = constI32(0)
	cases := []struct {
		name   string
		wasm   []byte
		stages []Stage
		want   string
	}{
		{"not wasm", []byte("\x7fELF not a module"), nil, "not a valid WebAssembly module"},
		{"no version export", wasmModule(nil, without(rawPlugin(1), "semaq_abi_version")), nil, "does not export semaq_abi_version"},
		{"version 2", wasmModule(nil, rawPlugin(2)), nil, "speaks ABI version 2; this broker speaks version 1"},
		{"imports env", wasmModule([][2]string{{"env", "host_call"}}, rawPlugin(1)), nil, "imports env.host_call; a plugin may import only from wasi_snapshot_preview1"},
		{"no alloc", wasmModule(nil, without(rawPlugin(1), "semaq_alloc")), nil, "does not export semaq_alloc"},
		{"stage missing", wasmModule(nil, rawPlugin(1)), []Stage{StageTokens}, "does not implement the tokens stage"},
		{"no stage at all", wasmModule(nil, without(rawPlugin(1), "semaq_ingress")), nil, "implements no stage"},
		{"wrong stage signature", wasmModule(nil, wrongSig), nil, "semaq_ingress has signature (i32, i32) -> (i32), want (i32, i32) -> (i64)"},
		{"unknown stage", wasmModule(nil, rawPlugin(1)), []Stage{"egress"}, `unknown plugin stage "egress"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := rt.Load(context.Background(), "bad", c.wasm, c.stages, Limits{})
			if err == nil {
				p.Close(context.Background())
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "plugin bad: ") {
				t.Fatalf("error %q, want it to start with the plugin's name and say %q", err, c.want)
			}
		})
	}
}

func TestLoadRefusesBadNamesAndLimits(t *testing.T) {
	rt := newRuntime(t, RuntimeConfig{})
	wasm := wasmModule(nil, rawPlugin(1))
	for _, c := range []struct {
		name string
		lim  Limits
		want string
	}{
		{"", Limits{}, "must be 1 to 128 bytes"},
		{"a b", Limits{}, "only letters, digits"},
		{strings.Repeat("x", 129), Limits{}, "must be 1 to 128 bytes"},
		{"ok", Limits{MemoryPages: 1}, "memory_pages 1: must be from 64 to 65536"},
		{"ok", Limits{MemoryPages: 70000}, "memory_pages 70000"},
		{"ok", Limits{Timeout: -1}, "plugin timeout -1ns"},
		{"ok", Limits{MaxInstances: 100000}, "max_instances 100000"},
		{"ok", Limits{FailAfter: -2}, "fail_after -2"},
	} {
		if _, err := rt.Load(context.Background(), c.name, wasm, nil, c.lim); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%.10q, %+v) = %v, want %q", c.name, c.lim, err, c.want)
		}
	}
}

// TestSignatures: with RequireSignature a module loads only with a signature by a trusted key over its bytes.
func TestSignatures(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	rt := newRuntime(t, RuntimeConfig{TrustedKeys: []ed25519.PublicKey{pub}, RequireSignature: true})
	wasm := wasmModule(nil, rawPlugin(1))

	p, err := rt.Load(context.Background(), "signed", wasm, nil, Limits{}, WithSignature(Sign(wasm, priv)))
	if err != nil {
		t.Fatalf("good signature refused: %v", err)
	}
	p.Close(context.Background())

	_, err = rt.Load(context.Background(), "unsigned", wasm, nil, Limits{})
	if !errors.Is(err, ErrUnsigned) || !strings.Contains(err.Error(), "requires a signature") {
		t.Errorf("missing signature: %v, want ErrUnsigned", err)
	}
	_, err = rt.Load(context.Background(), "forged", wasm, nil, Limits{}, WithSignature(Sign(wasm, other)))
	if !errors.Is(err, ErrBadSignature) {
		t.Errorf("untrusted key's signature: %v, want ErrBadSignature", err)
	}
	tampered := append([]byte(nil), wasm...)
	tampered = append(tampered, 0x00, 0x01, 0x00) // a custom section with an empty name: still a valid module
	_, err = rt.Load(context.Background(), "tampered", tampered, nil, Limits{}, WithSignature(Sign(wasm, priv)))
	if !errors.Is(err, ErrBadSignature) {
		t.Errorf("tampered module: %v, want ErrBadSignature", err)
	}
	if err := Verify(wasm, []byte("short"), []ed25519.PublicKey{pub}); !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "64 bytes") {
		t.Errorf("short signature: %v", err)
	}

	// Without RequireSignature, an unsigned module loads, but a signature given is still checked.
	open := newRuntime(t, RuntimeConfig{TrustedKeys: []ed25519.PublicKey{pub}})
	if _, err := open.Load(context.Background(), "unsigned", wasm, nil, Limits{}); err != nil {
		t.Errorf("unsigned module where none is required: %v", err)
	}
	if _, err := open.Load(context.Background(), "forged", wasm, nil, Limits{}, WithSignature(Sign(wasm, other))); !errors.Is(err, ErrBadSignature) {
		t.Errorf("bad signature where none is required: %v, want ErrBadSignature", err)
	}
}
