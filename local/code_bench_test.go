package local_test

import (
	"context"
	"testing"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// BenchmarkCodeRoundTrip measures a cell's round trip in the code
// interpreter (SDK → agent's data plane → interpreter → kernel and back),
// for each language, beside the baseline of a command's round trip
// (`true`) in the same sandbox.
func BenchmarkCodeRoundTrip(b *testing.B) {
	_, name := testutil.InterpreterImage(b)
	s := newStack(b, engine.Config{DefaultTemplate: name})
	sb := s.create(b, sdk.CreateOptions{})
	ctx := context.Background()
	b.Run("command baseline", func(b *testing.B) {
		for b.Loop() {
			if _, err := sb.Commands.Run(ctx, "true"); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct{ lang, code string }{
		{sdk.LanguagePython, "1 + 1"},
		{sdk.LanguageJavaScript, "1 + 1"},
		{sdk.LanguageBash, "true"},
	} {
		b.Run(tc.lang, func(b *testing.B) {
			// The first cell waits for the kernel to start.
			if _, err := sb.RunCode(ctx, tc.code, sdk.WithLanguage(tc.lang)); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				e, err := sb.RunCode(ctx, tc.code, sdk.WithLanguage(tc.lang))
				if err != nil || e.Error != nil {
					b.Fatalf("%v %+v", err, e)
				}
			}
		})
	}
}
