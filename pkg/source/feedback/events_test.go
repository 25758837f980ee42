package feedback

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEventLimiterBurstThenDrops(t *testing.T) {
	var l eventLimiter
	now := time.Now()
	allowed := 0
	for range 3 * EventBurst {
		if l.allow("a", now) {
			allowed++
		}
	}
	assert.Falsef(t, allowed != EventBurst, "a burst of %d Events let %d through, want %d", 3*EventBurst, allowed, EventBurst)
	// Another proxy has its own budget.
	assert.True(t, l.allow("b", now), "proxy b was limited by proxy a's Events")
	// Idle limiters are forgotten.
	l.allow("c", now.Add(2*limiterIdle))
	_, ok := l.limiters["a"]
	assert.False(t, ok, "an idle limiter was kept")
}

func TestEventTime(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		e    corev1.Event
		want time.Time
	}{
		{"legacy lastTimestamp", corev1.Event{LastTimestamp: metav1.NewTime(t0)}, t0},
		{"events.k8s.io eventTime", corev1.Event{EventTime: metav1.NewMicroTime(t0.Add(time.Second))}, t0.Add(time.Second)},
		{"series is the latest", corev1.Event{EventTime: metav1.NewMicroTime(t0), Series: &corev1.EventSeries{LastObservedTime: metav1.NewMicroTime(t0.Add(time.Minute))}}, t0.Add(time.Minute)},
		{"creation when nothing else", corev1.Event{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}}, t0},
	}
	for _, tc := range tests {
		got := eventTime(&tc.e)
		assert.Truef(t, got.Equal(tc.want), "%s: %s, want %s", tc.name, got, tc.want)
	}
}
