package users

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// Handlers serve $SQ.API.USER.* with auth on. Only the admin role's
// permissions reach these subjects. With auth off they answer that users
// need it, rather than leave `semaq user` wondering whether this is a
// SemaQ broker.
func (s *Service) Handlers() api.Handlers {
	if s.store == nil {
		off := func(m *nats.Msg) {
			api.ReplyErr(s.log, m, semaq.NewAPIError(semaq.ErrBadRequest, "users: this broker runs without auth; start it with --auth (auth: true)"))
		}
		return api.Handlers{semaq.APIUserAdd: off, semaq.APIUserList: off, fmt.Sprintf(semaq.APIUserInfoT, "*"): off,
			semaq.APIUserRemove: off, semaq.APIUserRotate: off, semaq.APIUserQuota: off}
	}
	st := s.store
	return api.Handlers{
		semaq.APIUserAdd: api.OpWithin(s.log, "user add", api.ChangeTimeout, func(ctx context.Context, r *semaq.UserAddRequest) (out any, err error) {
			defer s.deps.Audit(ctx, semaq.AuditOpUserAdd, r.Name)(&out, &err)
			u, k, err := st.Add(ctx, *r)
			if err != nil {
				return nil, err
			}
			s.syncUsers(ctx)
			s.log.Info("auth: user added", "user", u.Name, "role", u.Role, "key_id", k.ID)
			return semaq.UserAddResponse{User: u.Info(), Key: k.String()}, nil
		}, nil),
		semaq.APIUserList: api.Op(s.log, "user list", func(context.Context, *struct{}) (any, error) {
			resp := semaq.UserListResponse{Users: []semaq.UserInfo{}}
			for _, u := range st.List() {
				resp.Users = append(resp.Users, u.Info())
			}
			return resp, nil
		}, nil),
		fmt.Sprintf(semaq.APIUserInfoT, "*"): api.NamedOp(s.log, "user info", func(_ context.Context, name string, _ *struct{}) (any, error) {
			u, err := st.Get(name)
			if err != nil {
				return nil, err
			}
			return u.Info(), nil
		}, nil),
		semaq.APIUserRemove: api.OpWithin(s.log, "user rm", api.ChangeTimeout, func(ctx context.Context, r *semaq.UserRemoveRequest) (out any, err error) {
			defer s.deps.Audit(ctx, semaq.AuditOpUserRemove, r.Name)(&out, &err)
			defer s.revokingHere(r.Name)()
			var nkey string // the server lists nkey connections by their nkey
			if u, err := st.Get(r.Name); err == nil {
				nkey = u.Nkey
			}
			if err := st.Remove(ctx, r.Name); err != nil {
				return nil, err
			}
			n := s.closeUserConns(r.Name, nkey)
			s.syncUsers(ctx)
			s.log.Info("auth: user removed", "user", r.Name, "closed_connections", n)
			return semaq.UserRemoveResponse{Success: true, Closed: n}, nil
		}, nil),
		semaq.APIUserQuota: s.quotaHandler(),
		semaq.APIUserRotate: api.OpWithin(s.log, "key rotate", api.ChangeTimeout, func(ctx context.Context, r *semaq.UserRotateRequest) (out any, err error) {
			defer s.deps.Audit(ctx, semaq.AuditOpKeyRotate, r.Name)(&out, &err)
			defer s.revokingHere(r.Name)()
			u, k, err := st.Rotate(ctx, r.Name, r.ExpiresIn)
			if err != nil {
				return nil, err
			}
			n := s.closeUserConns(r.Name, u.Nkey)
			s.syncUsers(ctx)
			s.log.Info("auth: key rotated", "user", u.Name, "key_id", k.ID, "closed_connections", n)
			return semaq.UserAddResponse{User: u.Info(), Key: k.String()}, nil
		}, nil),
	}
}

// quotaHandler serves $SQ.API.USER.QUOTA: a user's own quotas
// changed, charged by the ingress from the moment the answer is sent.
func (s *Service) quotaHandler() nats.MsgHandler {
	st := s.store
	return api.OpWithin(s.log, "user quota", api.ChangeTimeout, func(ctx context.Context, r *semaq.UserQuotaRequest) (out any, err error) {
		defer s.deps.Audit(ctx, semaq.AuditOpUserQuota, r.Name)(&out, &err)
		u, err := st.SetQuota(ctx, *r)
		if err != nil {
			return nil, err
		}
		s.log.Info("auth: user quota set", "user", u.Name, "rpm", u.RPM, "tpm", u.TPM)
		return u.Info(), nil
	}, nil)
}

// AuditRead is a user as `semaq user info` shows it, for an audit
// record's before and after: key IDs, never a key or its hash. nil with
// auth off or for a user the store does not have.
func (s *Service) AuditRead(_ context.Context, name string) any {
	if s.store == nil {
		return nil
	}
	u, err := s.store.Get(name)
	if err != nil {
		return nil
	}
	return u.Info()
}
