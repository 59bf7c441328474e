package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/semaq/semaq/semaq"
)

// The upstream's health decides whether the worker is in the agent
// registry: a worker whose model server does not answer would take
// requests only to fail them (502), and the gateway would keep sending
// them (a model listed is a model accepted). So the worker refuses to
// start with an upstream that does not answer GET /models, and while
// running withdraws its announcement when the upstream stops answering
// and announces itself again when it answers; each change is logged once.

// checker is an upstream that can say whether it answers.
type checker interface {
	// check asks the upstream; nil when it answered.
	check(ctx context.Context) error
}

// checkTimeout bounds one health check.
const checkTimeout = 3 * time.Second

// checkUpstream is the check at start.
func (w *Worker) checkUpstream(ctx context.Context) error {
	c, ok := w.up.(checker)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if err := c.check(ctx); err != nil {
		return fmt.Errorf("worker: upstream %s does not answer GET /models: %w; is the model server running at that URL?", w.upstream, err)
	}
	return nil
}

// watchUpstream checks the upstream every HealthInterval until ctx ends,
// withdrawing the worker's announcement while it does not answer.
func (w *Worker) watchUpstream(ctx context.Context) {
	c, ok := w.up.(checker)
	if !ok {
		return
	}
	t := time.NewTicker(w.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		cctx, cancel := context.WithTimeout(ctx, min(checkTimeout, max(w.cfg.HealthInterval, 100*time.Millisecond)))
		err := c.check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !w.down.Load():
			w.down.Store(true)
			w.log.Warn("upstream stopped answering; models withdrawn from the registry until it answers",
				"upstream", w.upstream, "models", w.cfg.Models, "err", err)
			w.withdraw(ctx)
		case err == nil && w.down.Load():
			if aerr := w.announce(ctx); aerr != nil {
				w.log.Warn("upstream answers again but announcing failed; retrying", "err", aerr)
				continue
			}
			w.down.Store(false)
			w.log.Info("upstream answers again; models announced", "upstream", w.upstream, "models", w.cfg.Models)
		}
	}
}

// announce puts the worker in the agent registry (renewed until
// withdraw).
func (w *Worker) announce(ctx context.Context) error {
	caps := map[string]string{semaq.CapModels: strings.Join(w.cfg.Models, ",")}
	if a := w.cfg.Labels["adapter"]; a != "" {
		caps[semaq.CapAdapters] = a
	}
	if w.cfg.Upstream == "sim" {
		caps["upstream"] = "sim"
	}
	ann, err := w.c.Announce(ctx, semaq.Agent{ID: w.cfg.ID, Intents: []string{semaq.InferIntent}, Capabilities: caps,
		Subject: semaq.InferSubjectPrefix + ">"}, w.cfg.AnnounceTTL)
	if err != nil {
		return fmt.Errorf("worker: announcing: %w", err)
	}
	w.annMu.Lock()
	w.ann = ann
	w.annMu.Unlock()
	return nil
}

// withdraw takes the worker out of the agent registry, if it is in.
func (w *Worker) withdraw(ctx context.Context) {
	w.annMu.Lock()
	ann := w.ann
	w.ann = nil
	w.annMu.Unlock()
	if ann == nil {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := ann.Leave(lctx); err != nil {
		w.log.Warn("leaving the agent registry", "err", err)
	}
}

// check asks GET <base>/models. Any answer below 500 counts as answering
// (a server without /models still serves completions), except 401 and
// 403: the key is refused, so would every request be.
func (h *httpUpstream) check(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.models, nil)
	if err != nil {
		return err
	}
	if h.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+h.apiKey)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		// The url.Error repeats the URL (with the password starred); the
		// caller names the upstream once, redacted.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return errors.New("no answer in time")
		}
		return err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("status %d: the API key is refused (--api-key-env)", resp.StatusCode)
	case resp.StatusCode >= 500:
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
