package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/semaq"
)

// The models the gateway answers for: those live workers announce, whose
// subject a queue captures (GET /v1/models, the check before a request).

// getModel is GET /v1/models/{id}: one live model, in OpenAI's shape.
func (g *Gateway) getModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ok, err := g.modelLive(r.Context(), id, false)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, openai.TypeServer, "unavailable", "looking up the model: "+err.Error())
		return
	}
	if !ok {
		e := &openai.Error{Message: fmt.Sprintf("The model `%s` does not exist or no worker serves it.", id),
			Type: openai.TypeInvalidRequest, Param: openai.Str("model"), Code: openai.Str("model_not_found")}
		writeJSON(w, http.StatusNotFound, openai.ErrorBody{Error: e})
		return
	}
	writeJSON(w, http.StatusOK, openai.Model{ID: id, Object: "model", OwnedBy: "semaq"})
}

func (g *Gateway) listModels(w http.ResponseWriter, r *http.Request) {
	models, err := g.liveModels(r.Context(), true)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, openai.TypeServer, "unavailable", "listing models: "+err.Error())
		return
	}
	list := openai.ModelList{Object: "list", Data: []openai.Model{}}
	for _, m := range models {
		list.Data = append(list.Data, openai.Model{ID: m, Object: "model", Created: 0, OwnedBy: "semaq"})
	}
	g.withRegistry(r.Context(), &list)
	writeJSON(w, http.StatusOK, list)
}

// withRegistry adds the model registry to a listing: every registered
// model with an active version is listed (its requests wait for a worker
// of that version), each with its active version and canary. A registry
// that cannot be read leaves the listing as the workers make it.
func (g *Gateway) withRegistry(ctx context.Context, list *openai.ModelList) {
	reg, err := g.c.ModelList(ctx)
	if err != nil {
		return
	}
	for _, m := range reg.Models {
		if m.Active == "" {
			continue
		}
		i := slices.IndexFunc(list.Data, func(e openai.Model) bool { return e.ID == m.Name })
		if i < 0 {
			list.Data = append(list.Data, openai.Model{ID: m.Name, Object: "model", OwnedBy: "semaq"})
			i = len(list.Data) - 1
		}
		list.Data[i].ActiveVersion, list.Data[i].CanaryVersion, list.Data[i].CanaryPercent = m.Active, m.Canary, m.CanaryPercent
	}
	slices.SortFunc(list.Data, func(a, b openai.Model) int { return strings.Compare(a.ID, b.ID) })
}

// liveModels returns the models served by live workers: the union of the
// models announced by agents with the inference intent, less those whose
// subject (ai.infer.<model>) no queue captures (lost in a broker restart,
// deleted), which no request could reach. The queue is INFER_<model> or
// one shared by several models (ai.infer.>). A list younger than ModelsTTL is reused unless
// fresh is set.
func (g *Gateway) liveModels(ctx context.Context, fresh bool) ([]string, error) {
	g.mu.Lock()
	if !fresh && time.Since(g.modelsAt) < g.o.ModelsTTL {
		m := g.models
		g.mu.Unlock()
		return m, nil
	}
	g.mu.Unlock()
	// One registry read at a time: requests that wanted a fresh list while
	// another read was under way take its result.
	asked := time.Now()
	g.refresh.Lock()
	defer g.refresh.Unlock()
	g.mu.Lock()
	if g.modelsAt.After(asked) {
		m := g.models
		g.mu.Unlock()
		return m, nil
	}
	g.mu.Unlock()
	agents, err := g.c.Agents(ctx)
	if err != nil {
		return nil, err
	}
	var models []string
	for _, a := range agents {
		if slices.Contains(a.Intents, semaq.InferIntent) {
			models = append(models, semaq.SplitList(a.Capabilities[semaq.CapModels])...)
		}
	}
	slices.Sort(models)
	models = slices.Compact(models)
	queueOf := make(map[string]string, len(models))
	if len(models) > 0 {
		queues, err := g.c.Queues(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range models {
			subj := semaq.InferSubject(m)
		find:
			for _, q := range queues {
				for _, p := range q.Config.Subjects {
					if subjectMatches(p, subj) {
						queueOf[m] = q.Config.Name
						break find
					}
				}
			}
		}
		models = slices.DeleteFunc(models, func(m string) bool { return queueOf[m] == "" })
	}
	g.mu.Lock()
	g.models, g.queueOf, g.modelsAt = models, queueOf, time.Now()
	g.mu.Unlock()
	return models, nil
}

// queueOf is the queue that holds model's requests, as last read.
func (g *Gateway) queueFor(model string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.queueOf[model]; q != "" {
		return q
	}
	return semaq.InferQueue(model)
}

// subjectMatches reports whether a literal subject matches a pattern
// ('*' one token, '>' the rest).
func subjectMatches(pattern, subject string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case pt == ">":
			return true
		case pt != "*" && pt != st:
			return false
		case !pmore || !smore:
			return !pmore && !smore
		}
		pattern, subject = prest, srest
	}
}

// modelLive says whether a live worker serves model, reading the registry
// again when the cached list does not have it (a worker that just
// started); with wait, for up to Options.ModelWait until one announces
// itself (a request; not a lookup or the watch of a running request).
func (g *Gateway) modelLive(ctx context.Context, model string, wait bool) (bool, error) {
	models, err := g.liveModels(ctx, false)
	if err != nil {
		return false, err
	}
	if _, ok := slices.BinarySearch(models, model); ok {
		return true, nil
	}
	d := g.o.ModelWait
	if d == 0 {
		d = DefaultModelWait
	}
	if !wait {
		d = 0
	}
	deadline := time.Now().Add(d)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		models, err = g.liveModels(ctx, true)
		if err != nil {
			return false, err
		}
		if _, ok := slices.BinarySearch(models, model); ok || !time.Now().Before(deadline) {
			return ok, nil
		}
		// A worker starting now announces itself within moments.
		t := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
	}
}
