package identity

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/semaq"
)

func TestValidateCredential(t *testing.T) {
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	acct, _ := nkeys.CreateAccount()
	apub, _ := acct.PublicKey()
	// The key with its last character changed (its checksum then fails);
	// "X" alone would leave a key that ends in X as it is.
	last := "X"
	if strings.HasSuffix(pub, last) {
		last = "Y"
	}
	base := semaq.UserAddRequest{Name: "gpu-7", Role: semaq.RoleWorker, Queues: []string{"INFER_*"}}
	with := func(nkey, cert string) semaq.UserAddRequest {
		r := base
		r.Nkey, r.CertSubject = nkey, cert
		return r
	}
	for _, r := range []semaq.UserAddRequest{with(pub, ""), with("", "CN=gpu-7,O=acme")} {
		if err := Validate(r); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for _, tc := range []struct {
		r    semaq.UserAddRequest
		want string
	}{
		{with(string(seed), ""), "nkey: this looks like a seed"},
		{with(apub, ""), "public key of an account"},
		{with("UABC", ""), "not a public nkey"},
		{with(pub[:55]+last, ""), "not a public nkey"},
		{with(strings.Repeat("U", 100), ""), "longer than 64"},
		{with(pub, "CN=x"), "not both"},
		{func() semaq.UserAddRequest { r := with(pub, ""); r.ExpiresIn = time.Hour; return r }(), "no key to expire"},
		{semaq.UserAddRequest{Name: pub, Role: semaq.RoleAdmin}, "is a public nkey"},
		{with("", "CN="), "cert_subject: "},
		{with("", strings.Repeat("O=acme,", 200)), "cert_subject: longer than"},
	} {
		err := Validate(tc.r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("nkey %.10q cert %.20q: %v, want an error saying %q", tc.r.Nkey, tc.r.CertSubject, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), string(seed)) {
			t.Errorf("the error echoes a seed")
		}
	}
}
