package local

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// roundTrip is what the API server hands back: JSON, times to the second.
func roundTrip(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestKubeletStatusIsStable: once written, a pod's status is what kubeletStatus wants, so the
// tracker writes each state once: Running, then (for a pod with a run time) Succeeded.
func TestKubeletStatusIsStable(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u", Annotations: map[string]string{AnnotationRunTime: "1500ms"}},
		Spec: corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "init"}},
			Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
	now := time.Date(2030, 1, 1, 10, 0, 0, 700e6, time.UTC)
	writes := 0
	for step := range 40 { // 4s in 100ms steps
		at := now.Add(time.Duration(step) * 100 * time.Millisecond)
		s, after := kubeletStatus(p, "10.0.0.1", "100.96.0.2", at)
		if s != nil {
			writes++
			p = p.DeepCopy()
			p.Status = *s
			p = roundTrip(t, p)
		}
		if p.Status.Phase == corev1.PodRunning && after <= 0 {
			t.Fatalf("running pod with a run time: no time to look again")
		}
	}
	if writes != 2 || p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("%d writes, phase %s; want 2 writes ending Succeeded", writes, p.Status.Phase)
	}
	if c := podCondition(p.Status.Conditions, corev1.PodScheduled); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("the scheduler's condition was lost: %+v", p.Status.Conditions)
	}
}

func TestRunTime(t *testing.T) {
	job := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", Controller: ptr.To(true)}}
	cases := []struct {
		name    string
		policy  corev1.RestartPolicy
		annot   string
		owners  []metav1.OwnerReference
		want    time.Duration
		exits   bool
		explain string
	}{
		{"server", corev1.RestartPolicyAlways, "", nil, 0, false, "runs until deleted"},
		{"always ignores the annotation", corev1.RestartPolicyAlways, "1s", nil, 0, false, "restarts are not simulated"},
		{"job default", corev1.RestartPolicyNever, "", job, DefaultJobRunTime, true, "a Job's pod completes"},
		{"job annotated", corev1.RestartPolicyOnFailure, "250ms", job, 250 * time.Millisecond, true, "the annotation wins"},
		{"bare pod annotated", corev1.RestartPolicyNever, "0s", nil, 0, true, "exits at once"},
		{"bare pod", corev1.RestartPolicyNever, "", nil, 0, false, "runs until deleted"},
		{"unreadable", corev1.RestartPolicyNever, "soon", job, 0, false, "treated as no run time"},
	}
	for _, c := range cases {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: c.owners}, Spec: corev1.PodSpec{RestartPolicy: c.policy}}
		if c.annot != "" {
			p.Annotations = map[string]string{AnnotationRunTime: c.annot}
		}
		if d, exits := runTime(p); d != c.want || exits != c.exits {
			t.Errorf("%s: runTime %s %v, want %s %v (%s)", c.name, d, exits, c.want, c.exits, c.explain)
		}
	}
}

// TestReadyAfter: a pod with the ready-after annotation runs at once but is Ready only once the
// delay has passed, and the tracker is told when to look again.
func TestReadyAfter(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u", Annotations: map[string]string{AnnotationReadyAfter: "3s"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
	}
	now := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	s, after := kubeletStatus(p, "10.0.0.1", "100.96.0.2", now)
	if s == nil || s.Phase != corev1.PodRunning || after != 3*time.Second {
		t.Fatalf("at start: status %v, look again after %s; want Running and 3s", s, after)
	}
	if c := podCondition(s.Conditions, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" || s.ContainerStatuses[0].Ready {
		t.Fatalf("ready before the delay: %+v %+v", c, s.ContainerStatuses)
	}
	p.Status = *s
	p = roundTrip(t, p)
	s, after = kubeletStatus(p, "10.0.0.1", "100.96.0.2", now.Add(3*time.Second))
	if s == nil || after != 0 {
		t.Fatalf("after the delay: status %v, after %s", s, after)
	}
	if c := podCondition(s.Conditions, corev1.PodReady); c.Status != corev1.ConditionTrue || !s.ContainerStatuses[0].Ready {
		t.Fatalf("not ready after the delay: %+v", c)
	}
}
