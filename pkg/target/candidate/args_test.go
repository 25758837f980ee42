package candidate

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func TestDecodeArgs(t *testing.T) {
	defaults := func(mutate func(*Args)) *Args {
		a := &Args{
			PermitTimeout:      &metav1.Duration{Duration: DefaultPermitTimeout},
			APITimeout:         &metav1.Duration{Duration: DefaultAPITimeout},
			ReservationWorkers: ptr.To[int32](DefaultReservationWorkers),
		}
		if mutate != nil {
			mutate(a)
		}
		return a
	}
	tests := []struct {
		name    string
		obj     runtime.Object
		want    *Args
		wantErr string
	}{
		{name: "no pluginConfig: defaults", obj: nil, want: defaults(nil)},
		{name: "empty args: defaults", obj: &runtime.Unknown{}, want: defaults(nil)},
		{name: "JSON", obj: &runtime.Unknown{Raw: []byte(`{"permitTimeout":"90s","reservationWorkers":2}`), ContentType: runtime.ContentTypeJSON},
			want: defaults(func(a *Args) { a.PermitTimeout.Duration = 90 * time.Second; a.ReservationWorkers = ptr.To[int32](2) })},
		{name: "YAML with apiVersion and kind", obj: &runtime.Unknown{Raw: []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: CandidateArgs\npermitTimeout: 10m\napiTimeout: 3s\n"), ContentType: runtime.ContentTypeYAML},
			want: defaults(func(a *Args) {
				a.TypeMeta = metav1.TypeMeta{APIVersion: "kubescheduler.config.k8s.io/v1", Kind: "CandidateArgs"}
				a.PermitTimeout.Duration = 10 * time.Minute
				a.APITimeout.Duration = 3 * time.Second
			})},
		{name: "the framework's cap exactly", obj: &Args{PermitTimeout: &metav1.Duration{Duration: MaxPermitTimeout}},
			want: defaults(func(a *Args) { a.PermitTimeout.Duration = MaxPermitTimeout })},
		{name: "above the framework's cap", obj: &Args{PermitTimeout: &metav1.Duration{Duration: 16 * time.Minute}}, wantErr: "longer than 15m0s"},
		{name: "zero timeout", obj: &runtime.Unknown{Raw: []byte(`{"permitTimeout":"0s"}`)}, wantErr: "permitTimeout: 0s must be positive"},
		{name: "negative API timeout", obj: &runtime.Unknown{Raw: []byte(`{"apiTimeout":"-1s"}`)}, wantErr: "apiTimeout: -1s must be positive"},
		{name: "no workers", obj: &runtime.Unknown{Raw: []byte(`{"reservationWorkers":0}`)}, wantErr: "reservationWorkers: 0 is not between 1 and 64"},
		{name: "misspelt field", obj: &runtime.Unknown{Raw: []byte(`{"permitTimout":"1m"}`)}, wantErr: `unknown field "permitTimout"`},
		{name: "not a duration", obj: &runtime.Unknown{Raw: []byte(`{"permitTimeout":"soon"}`)}, wantErr: "decoding"},
		{name: "another plugin's args", obj: &metav1.Status{}, wantErr: "have type *v1.Status"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeArgs(tc.obj)
			if tc.wantErr != "" {
				require.ErrorContainsf(t, err, tc.wantErr, "DecodeArgs() error = %v, want one containing %q", err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Empty(t, cmp.Diff(tc.want, got), "DecodeArgs() (-want,+got)")
		})
	}
}

func TestDecodeArgsDoesNotChangeItsInput(t *testing.T) {
	in := &Args{PermitTimeout: &metav1.Duration{Duration: time.Minute}}
	_, err := DecodeArgs(in)
	require.NoError(t, err)
	assert.Falsef(t, in.APITimeout != nil || in.ReservationWorkers != nil, "DecodeArgs defaulted its input: %+v", in)
}
