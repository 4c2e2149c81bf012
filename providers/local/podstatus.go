package local

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Pod annotations the local nodes' kubelet stand-in reads.
const (
	// AnnotationRunTime sets how long a pod's containers run before they exit (a Go duration,
	// e.g. 30s; 0s exits at once). It applies to pods with restartPolicy Never or OnFailure;
	// pods of a Job run DefaultJobRunTime without it, every other pod runs until deleted.
	AnnotationRunTime = "local.machinist.io/run-time"
	// AnnotationExitCode sets the exit code of the containers of such a pod: 0 (the default)
	// makes it Succeeded, anything else Failed (container restarts are not simulated).
	AnnotationExitCode = "local.machinist.io/exit-code"
	// AnnotationReadyAfter sets how long after its start a pod's containers become ready (a Go
	// duration), as a readiness probe would delay them: the pod runs but is not Ready until then.
	// Without it the containers are ready at once.
	AnnotationReadyAfter = "local.machinist.io/ready-after"
	// DefaultJobRunTime is how long a Job's pods run without the run-time annotation: long
	// enough to be seen Running, short enough for a Job to finish while one watches.
	DefaultJobRunTime = 5 * time.Second
)

// podFinished reports whether the pod is Succeeded or Failed.
func podFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// runTime returns how long the pod's containers run, and whether they exit at all.
func runTime(p *corev1.Pod) (time.Duration, bool) {
	if p.Spec.RestartPolicy == corev1.RestartPolicyAlways || p.Spec.RestartPolicy == "" {
		return 0, false
	}
	if v, ok := p.Annotations[AnnotationRunTime]; ok {
		if d, err := time.ParseDuration(strings.TrimSpace(v)); err == nil && d >= 0 {
			return d, true
		}
		return 0, false // an unreadable value: the pod runs until deleted, as if unannotated
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "Job" && strings.HasPrefix(o.APIVersion, "batch/") && o.Controller != nil && *o.Controller {
			return DefaultJobRunTime, true
		}
	}
	return 0, false
}

// readyAfter returns how long after its start the pod's containers become ready.
func readyAfter(p *corev1.Pod) time.Duration {
	d, err := time.ParseDuration(strings.TrimSpace(p.Annotations[AnnotationReadyAfter]))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

func exitCode(p *corev1.Pod) int32 {
	v, err := strconv.ParseInt(strings.TrimSpace(p.Annotations[AnnotationExitCode]), 10, 32)
	if err != nil {
		return 0
	}
	return int32(v)
}

// kubeletStatus returns the status kubelet reports for a pod it runs at now (nil when the
// current status already says it), and how long until it changes by itself (0: never). Init
// containers have completed, sidecars and containers run and are ready, the pod is Running
// with its IP — or, once its run time is over, its containers have exited and it is Succeeded
// or Failed. Times of unchanged states are kept, so a pod that looks right is not written.
func kubeletStatus(p *corev1.Pod, hostIP, podIP string, now time.Time) (*corev1.PodStatus, time.Duration) {
	old := p.Status
	s := *old.DeepCopy()
	start := metav1.NewTime(now.Truncate(time.Second))
	if s.StartTime != nil {
		start = *s.StartTime
	}
	s.StartTime = &start
	s.HostIP, s.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	s.PodIP, s.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}

	tl := timelineOf(p, start, now)
	tl.setContainerStatuses(p, &old, &s)
	tl.setPhaseAndConditions(p, &s, now)
	if equality.Semantic.DeepEqual(&s, &old) {
		return nil, tl.after
	}
	return &s, tl.after
}

// podTimeline is where a pod stands in the life the agent gives it.
type podTimeline struct {
	start, finished metav1.Time
	done            bool // its containers exited
	warm            bool // its containers are ready
	code            int32
	after           time.Duration // until its status changes next; 0: never
}

func timelineOf(p *corev1.Pod, start metav1.Time, now time.Time) podTimeline {
	run, exits := runTime(p)
	end := start.Add(run)
	tl := podTimeline{start: start, code: exitCode(p)}
	// API times have a resolution of a second: what is written must compare equal when read back.
	tl.finished = metav1.NewTime(end.Truncate(time.Second))
	tl.done = exits && !now.Before(end)
	if exits && !tl.done {
		tl.after = end.Sub(now)
	}
	readyAt := start.Add(readyAfter(p))
	tl.warm = !now.Before(readyAt)
	if wait := readyAt.Sub(now); !tl.warm && !tl.done && (tl.after == 0 || wait < tl.after) {
		tl.after = wait
	}
	return tl
}

// setContainerStatuses sets the statuses of the init containers (sidecars run alongside the
// containers; the others completed before them) and of the containers.
func (tl podTimeline) setContainerStatuses(p *corev1.Pod, old, s *corev1.PodStatus) {
	s.InitContainerStatuses = make([]corev1.ContainerStatus, 0, len(p.Spec.InitContainers))
	for _, c := range p.Spec.InitContainers {
		cs := containerStatus(p, c, old.InitContainerStatuses)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			// A sidecar: it runs alongside the containers.
			if tl.done {
				setTerminated(&cs, tl.start, tl.finished, 0, false)
			} else {
				setRunning(&cs, tl.start, tl.warm)
			}
		} else {
			// Completed before the containers started; a completed init container is ready.
			setTerminated(&cs, tl.start, tl.start, 0, true)
		}
		s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
	}
	s.ContainerStatuses = make([]corev1.ContainerStatus, 0, len(p.Spec.Containers))
	for _, c := range p.Spec.Containers {
		cs := containerStatus(p, c, old.ContainerStatuses)
		if tl.done {
			setTerminated(&cs, tl.start, tl.finished, tl.code, false)
		} else {
			setRunning(&cs, tl.start, tl.warm)
		}
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
	}
}

// setPhaseAndConditions sets the pod's phase and its four conditions as kubelet does.
func (tl podTimeline) setPhaseAndConditions(p *corev1.Pod, s *corev1.PodStatus, now time.Time) {
	ready, readyReason, readyMessage := corev1.ConditionTrue, "", ""
	containersReady := corev1.ConditionTrue
	sandbox := corev1.ConditionTrue
	switch {
	case tl.done:
		s.Phase = corev1.PodSucceeded
		if tl.code != 0 {
			s.Phase = corev1.PodFailed
		}
		ready, readyReason, containersReady, sandbox = corev1.ConditionFalse, "PodCompleted", corev1.ConditionFalse, corev1.ConditionFalse
	case !tl.warm:
		s.Phase = corev1.PodRunning
		var names []string
		for _, c := range p.Spec.Containers {
			names = append(names, c.Name)
		}
		ready, readyReason, containersReady = corev1.ConditionFalse, "ContainersNotReady", corev1.ConditionFalse
		readyMessage = fmt.Sprintf("containers with unready status: [%s]", strings.Join(names, " "))
	default:
		s.Phase = corev1.PodRunning
		var notReady []string
		for _, g := range p.Spec.ReadinessGates {
			if c := podCondition(s.Conditions, g.ConditionType); c == nil || c.Status != corev1.ConditionTrue {
				notReady = append(notReady, string(g.ConditionType))
			}
		}
		if len(notReady) > 0 {
			ready, readyReason = corev1.ConditionFalse, "ReadinessGatesNotReady"
			readyMessage = fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not True", strings.Join(notReady, ", "))
		}
	}
	containersReason, containersMessage := "", ""
	if containersReady != corev1.ConditionTrue {
		containersReason, containersMessage = readyReason, readyMessage
	}
	at := metav1.NewTime(now.Truncate(time.Second))
	s.Conditions = setPodCondition(s.Conditions, corev1.PodReadyToStartContainers, sandbox, "", "", at)
	s.Conditions = setPodCondition(s.Conditions, corev1.PodInitialized, corev1.ConditionTrue, "", "", at)
	s.Conditions = setPodCondition(s.Conditions, corev1.PodReady, ready, readyReason, readyMessage, at)
	s.Conditions = setPodCondition(s.Conditions, corev1.ContainersReady, containersReady, containersReason, containersMessage, at)
}

// containerStatus returns the container's current status or a new one.
func containerStatus(p *corev1.Pod, c corev1.Container, old []corev1.ContainerStatus) corev1.ContainerStatus {
	for _, cs := range old {
		if cs.Name == c.Name {
			return *cs.DeepCopy()
		}
	}
	return corev1.ContainerStatus{
		Name:        c.Name,
		Image:       c.Image,
		ImageID:     "local://" + c.Image,
		ContainerID: "local://" + string(p.UID) + "/" + c.Name,
	}
}

func setRunning(cs *corev1.ContainerStatus, start metav1.Time, ready bool) {
	if cs.State.Running == nil || cs.State.Waiting != nil || cs.State.Terminated != nil {
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}
	}
	cs.Ready = ready
	cs.Started = ptr.To(true)
}

func setTerminated(cs *corev1.ContainerStatus, start, finished metav1.Time, code int32, ready bool) {
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	want := corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: start, FinishedAt: finished, ContainerID: cs.ContainerID}
	if t := cs.State.Terminated; t == nil || !equality.Semantic.DeepEqual(*t, want) || cs.State.Running != nil || cs.State.Waiting != nil {
		cs.State = corev1.ContainerState{Terminated: &want}
	}
	cs.Ready = ready
	cs.Started = ptr.To(false)
}

func podCondition(conds []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// setPodCondition sets a condition, keeping its transition time when its status is unchanged.
func setPodCondition(conds []corev1.PodCondition, t corev1.PodConditionType, status corev1.ConditionStatus, reason, message string, now metav1.Time) []corev1.PodCondition {
	if c := podCondition(conds, t); c != nil {
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = status, reason, message
		return conds
	}
	return append(conds, corev1.PodCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now})
}
