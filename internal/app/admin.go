package app

import (
	"fmt"
	"os"

	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/config"
)

// Environment variables of the admin API's tokens: comma-separated secrets, so that two can be
// valid while one is rotated. The config's admin.tokens adds named ones.
const (
	AdminTokenEnv     = "WATUKUY_ADMIN_TOKEN"
	AdminReadTokenEnv = "WATUKUY_ADMIN_READ_TOKEN"
)

// adminTokens gathers the admin API's tokens from the environment, cfg (nil: none) and
// AddAdminToken, and checks them together.
func (env *Env) adminTokens(cfg *config.Config) ([]admintoken.Token, error) {
	ts := append(admin.ParseEnv(os.Getenv(AdminTokenEnv), "env", false), env.adminExtra...)
	ts = append(ts, admin.ParseEnv(os.Getenv(AdminReadTokenEnv), "env-read", true)...)
	if cfg != nil {
		ts = append(ts, cfg.Admin.AdminTokens()...)
	}
	if _, err := admintoken.NewSet(ts...); err != nil {
		return nil, fmt.Errorf("%w (tokens come from %s, %s and the config's admin.tokens)", err, AdminTokenEnv, AdminReadTokenEnv)
	}
	return ts, nil
}

// AddAdminToken adds a token that no environment variable or config gives (watukuy dev's
// generated one); it outlives reloads. Call it before the process serves.
func (env *Env) AddAdminToken(t admintoken.Token) error {
	env.adminExtra = append(env.adminExtra, t)
	ts, err := env.adminTokens(env.Config)
	if err != nil {
		env.adminExtra = env.adminExtra[:len(env.adminExtra)-1]
		return err
	}
	return env.Admin.Replace(ts)
}
