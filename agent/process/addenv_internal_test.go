package process

import (
	"slices"
	"testing"

	"github.com/lightbearco/tupper/agent/identity"
)

func TestAddEnvReplacesAndAdds(t *testing.T) {
	s, err := New(Config{Env: []string{"A=1", "B=2"}})
	if err != nil {
		t.Fatal(err)
	}
	s.AddEnv(map[string]string{"A": "9", "C": "3"})
	if got, want := *s.env.Load(), []string{"B=2", "A=9", "C=3"}; !slices.Equal(got, want) {
		t.Errorf("base environment %v, want %v", got, want)
	}
	// What commands get is built from it.
	if env := buildEnv(*s.env.Load(), &identity.User{Name: "user", Home: "/home/user"}, nil, false); !slices.Contains(env, "A=9") || !slices.Contains(env, "C=3") {
		t.Errorf("a command's environment %v lacks the added variables", env)
	}
}
