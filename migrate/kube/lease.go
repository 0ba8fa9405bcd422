package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// A cutover's lock is a coordination.k8s.io Lease, shardctl-cutover-NAME,
// held while an apply or a rollback runs and renewed every third of its
// duration; a holder that stops renewing loses it once its duration has
// passed since the last renewal. client-go's leaderelection campaigns
// until it wins; a second apply must be refused at once, naming the
// holder, so the Lease is read and written here directly, each write
// conditional on the resourceVersion read. The Lease also carries the
// record of what the cutover's Kubernetes steps did (AnnotationRecord),
// so that taking the lock and reading the record are one read.

// LeaseName names the Lease of a cutover.
func LeaseName(cutover string) string { return "shardctl-cutover-" + cutover }

// Record is what a cutover's Kubernetes steps did.
type Record struct {
	// Run is the run of the cutover the record is of; a new run (an apply
	// after a rollback, or of another plan) starts a new record.
	Run string `json:"run,omitempty"`
	// Restarts are the RestartedAt values set, by "apply deployment/a"
	// or "rollback deployment/a": written before the patch that sets one,
	// so that a run resumed after a crash waits for that rollout instead
	// of restarting it again.
	Restarts map[string]string `json:"restarts,omitempty"`
	// Done are the Kubernetes steps completed, in words, in order.
	Done []string `json:"done,omitempty"`
}

// LeaseState is a cutover's Lease as read.
type LeaseState struct {
	Holder  string     `json:"holder,omitempty"`
	Renewed *time.Time `json:"renewed,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
	Record  Record     `json:"record"`
}

// Held says whether a live holder has the lease at now.
func (s LeaseState) Held(now time.Time) bool {
	return s.Holder != "" && s.Expires != nil && now.Before(*s.Expires)
}

func stateOf(l *coordinationv1.Lease) (LeaseState, error) {
	var s LeaseState
	if h := l.Spec.HolderIdentity; h != nil {
		s.Holder = *h
	}
	if r := l.Spec.RenewTime; r != nil {
		renewed := r.Time
		s.Renewed = &renewed
		if d := l.Spec.LeaseDurationSeconds; d != nil {
			expires := renewed.Add(time.Duration(*d) * time.Second)
			s.Expires = &expires
		}
	}
	if raw, ok := l.Annotations[AnnotationRecord]; ok {
		if err := json.Unmarshal([]byte(raw), &s.Record); err != nil {
			return s, fmt.Errorf("lease %s: its %s annotation: %w", l.Name, AnnotationRecord, err)
		}
	}
	return s, nil
}

// HeldError is a Lease another live holder has.
type HeldError struct {
	Cutover, Namespace string
	LeaseState
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("cutover %s is run by %s: its Lease %s/%s was renewed at %s and expires at %s unless renewed; wait for it, or run cutover status",
		e.Cutover, e.Holder, e.Namespace, LeaseName(e.Cutover), e.Renewed.Local().Format(time.TimeOnly), e.Expires.Local().Format(time.TimeOnly))
}

// ErrLost is a Lease another holder took.
var ErrLost = errors.New("lost the lease")

// Lock is a cutover's Lease, held by Holder.
type Lock struct {
	c                          *Cluster
	Namespace, Cutover, Holder string
	TTL                        time.Duration
}

// Lock is the Lease of cutover in namespace, for holder.
func (c *Cluster) Lock(namespace, cutover, holder string, ttl time.Duration) *Lock {
	return &Lock{c: c, Namespace: namespace, Cutover: cutover, Holder: holder, TTL: ttl}
}

func (l *Lock) leases() interface {
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(context.Context, *coordinationv1.Lease, metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
} {
	return l.c.client.CoordinationV1().Leases(l.Namespace)
}

func (l *Lock) ref() string { return "leases.coordination.k8s.io/" + LeaseName(l.Cutover) }

// ReadLease reads a cutover's Lease; found is false when there is none.
func (c *Cluster) ReadLease(ctx context.Context, namespace, cutover string) (s LeaseState, found bool, err error) {
	l, err := c.client.CoordinationV1().Leases(namespace).Get(ctx, LeaseName(cutover), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return s, false, nil
	}
	if err != nil {
		return s, false, apiError("get", "leases.coordination.k8s.io/"+LeaseName(cutover), namespace, err)
	}
	s, err = stateOf(l)
	return s, true, err
}

// Acquire takes the Lease when it is free, expired or already Holder's;
// with force (a rollback preempting an apply) from any holder. It returns
// the holder it took the Lease from ("" when none or Holder), and a
// *HeldError when a live holder keeps it.
func (l *Lock) Acquire(ctx context.Context, force bool) (from string, err error) {
	err = retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		from = ""
		now := metav1.NewMicroTime(time.Now())
		secs := int32(max(1, l.TTL.Round(time.Second)/time.Second))
		cur, err := l.leases().Get(ctx, LeaseName(l.Cutover), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = l.leases().Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: LeaseName(l.Cutover), Labels: map[string]string{"app.kubernetes.io/managed-by": "shardctl"}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &l.Holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
			}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return apiError("create", l.ref(), l.Namespace, err)
			}
			return err
		}
		if err != nil {
			return apiError("get", l.ref(), l.Namespace, err)
		}
		st, err := stateOf(cur)
		if err != nil {
			return err
		}
		if st.Held(now.Time) && st.Holder != l.Holder && !force {
			return &HeldError{Cutover: l.Cutover, Namespace: l.Namespace, LeaseState: st}
		}
		next := cur.DeepCopy()
		if st.Holder != l.Holder {
			from = st.Holder
			next.Spec.AcquireTime = &now
			transitions := int32(1)
			if t := cur.Spec.LeaseTransitions; t != nil {
				transitions = *t + 1
			}
			next.Spec.LeaseTransitions = &transitions
		}
		next.Spec.HolderIdentity, next.Spec.RenewTime, next.Spec.LeaseDurationSeconds = &l.Holder, &now, &secs
		_, err = l.leases().Update(ctx, next, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return apiError("update", l.ref(), l.Namespace, err)
		}
		return err
	})
	return from, err
}

// change writes the Lease as f changes it, while Holder holds it: a
// Lease another holder took is ErrLost.
func (l *Lock) change(ctx context.Context, f func(*coordinationv1.Lease) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := l.leases().Get(ctx, LeaseName(l.Cutover), metav1.GetOptions{})
		if err != nil {
			return apiError("get", l.ref(), l.Namespace, err)
		}
		if h := cur.Spec.HolderIdentity; h == nil || *h != l.Holder {
			holder := "nobody"
			if h != nil && *h != "" {
				holder = *h
			}
			return fmt.Errorf("%w of cutover %s: %s holds it now", ErrLost, l.Cutover, holder)
		}
		next := cur.DeepCopy()
		if err := f(next); err != nil {
			return err
		}
		_, err = l.leases().Update(ctx, next, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return apiError("update", l.ref(), l.Namespace, err)
		}
		return err
	})
}

// Renew moves the Lease's renew time to now.
func (l *Lock) Renew(ctx context.Context) error {
	return l.change(ctx, func(lease *coordinationv1.Lease) error {
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.RenewTime = &now
		return nil
	})
}

// Release gives the Lease up, keeping its record.
func (l *Lock) Release(ctx context.Context) error {
	err := l.change(ctx, func(lease *coordinationv1.Lease) error {
		lease.Spec.HolderIdentity, lease.Spec.RenewTime = nil, nil
		return nil
	})
	if errors.Is(err, ErrLost) {
		return nil // someone else has it: nothing of ours to give up
	}
	return err
}

// Record reads the record on the Lease.
func (l *Lock) Record(ctx context.Context) (Record, error) {
	s, _, err := l.c.ReadLease(ctx, l.Namespace, l.Cutover)
	return s.Record, err
}

// SaveRecord changes the record on the Lease.
func (l *Lock) SaveRecord(ctx context.Context, change func(*Record)) error {
	return l.change(ctx, func(lease *coordinationv1.Lease) error {
		st, err := stateOf(lease)
		if err != nil {
			return err
		}
		change(&st.Record)
		b, err := json.Marshal(st.Record)
		if err != nil {
			return err
		}
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[AnnotationRecord] = string(b)
		return nil
	})
}
