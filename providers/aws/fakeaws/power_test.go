package fakeaws

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/machinist-io/machinist/internal/eventually"
)

// TestStopStartTransitions: running → stopping → stopped → pending → running on the cloud's
// clock, keeping the instance's ID and private IP; EC2's refusals in the states it refuses.
func TestStopStartTransitions(t *testing.T) {
	e := newEnv(t)
	e.c.SetStartDelay(time.Minute)
	e.c.SetBootDelays(BootDelays{Stopping: time.Minute, Starting: 2 * time.Minute})
	out, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := *out.Instances[0].InstanceId
	ip := *out.Instances[0].PrivateIpAddress
	state := func() string { return e.c.Instances()[0].State }
	if _, err := e.client.StopInstances(ctx(t), &ec2.StopInstancesInput{InstanceIds: []string{id}}); code(err) != "IncorrectInstanceState" {
		t.Fatalf("StopInstances of a pending instance = %v; want IncorrectInstanceState", err)
	}
	e.clock.Step(time.Minute)
	stop, err := e.client.StopInstances(ctx(t), &ec2.StopInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if ch := stop.StoppingInstances[0]; ch.PreviousState.Name != ec2types.InstanceStateNameRunning || ch.CurrentState.Name != ec2types.InstanceStateNameStopping {
		t.Fatalf("StopInstances answered %s → %s; want running → stopping", ch.PreviousState.Name, ch.CurrentState.Name)
	}
	if _, err := e.client.StartInstances(ctx(t), &ec2.StartInstancesInput{InstanceIds: []string{id}}); code(err) != "IncorrectInstanceState" {
		t.Fatalf("StartInstances of a stopping instance = %v; want IncorrectInstanceState", err)
	}
	e.clock.Step(time.Minute)
	if s := state(); s != StateStopped {
		t.Fatalf("state %s a minute after the stop; want stopped", s)
	}
	if _, err := e.client.StopInstances(ctx(t), &ec2.StopInstancesInput{InstanceIds: []string{id}, Hibernate: aws.Bool(true)}); err != nil {
		t.Fatalf("StopInstances of a stopped instance = %v; want OK (EC2 answers its state)", err)
	}
	if _, err := e.client.StartInstances(ctx(t), &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(time.Minute)
	if s := state(); s != StatePending {
		t.Fatalf("state %s a minute after the start; want pending (Starting is 2 minutes)", s)
	}
	e.clock.Step(time.Minute)
	if got := e.c.Instances()[0]; got.State != StateRunning || got.ID != id || got.PrivateIP != ip || got.Starts != 1 {
		t.Fatalf("after the start: %s %s %s starts %d; want running %s %s, 1 start", got.ID, got.State, got.PrivateIP, got.Starts, id, ip)
	}
	if _, err := e.client.TerminateInstances(ctx(t), &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.StartInstances(ctx(t), &ec2.StartInstancesInput{InstanceIds: []string{id}}); code(err) != "IncorrectInstanceState" {
		t.Fatalf("StartInstances of a terminated instance = %v; want IncorrectInstanceState", err)
	}
}

// TestHibernationRules: hibernation needs HibernationOptions at launch and an encrypted root.
func TestHibernationRules(t *testing.T) {
	e := newEnv(t)
	hibernation := func(in *ec2.RunInstancesInput) {
		in.HibernationOptions = &ec2types.HibernationOptionsRequest{Configured: aws.Bool(true)}
	}
	if _, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil, hibernation); code(err) != "UnsupportedHibernationConfiguration" {
		t.Fatalf("RunInstances with hibernation and an unencrypted root = %v; want UnsupportedHibernationConfiguration", err)
	}
	plain, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.StopInstances(ctx(t), &ec2.StopInstancesInput{InstanceIds: []string{*plain.Instances[0].InstanceId}, Hibernate: aws.Bool(true)}); code(err) != "UnsupportedHibernationConfiguration" {
		t.Fatalf("hibernating an instance launched without it = %v; want UnsupportedHibernationConfiguration", err)
	}
	ok, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil, hibernation, func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings[0].Ebs.Encrypted = aws.Bool(true) })
	if err != nil {
		t.Fatalf("RunInstances with hibernation and an encrypted root = %v", err)
	}
	id := *ok.Instances[0].InstanceId
	if _, err := e.client.StopInstances(ctx(t), &ec2.StopInstancesInput{InstanceIds: []string{id}, Hibernate: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	d, err := e.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	got := d.Reservations[0].Instances[0]
	if !aws.ToBool(got.HibernationOptions.Configured) || got.State.Name != ec2types.InstanceStateNameStopped || aws.ToString(got.StateReason.Code) != "Client.UserInitiatedHibernate" {
		t.Fatalf("hibernated instance: configured %v, %s, reason %s; want configured, stopped by Client.UserInitiatedHibernate",
			aws.ToBool(got.HibernationOptions.Configured), got.State.Name, aws.ToString(got.StateReason.Code))
	}
}

// TestWaitReady: a first boot is Ready after FirstBoot, a start after Starting and Resume, by
// the cloud's clock; a stopped instance never becomes Ready.
func TestWaitReady(t *testing.T) {
	e := newEnv(t)
	e.c.SetStartDelay(time.Minute)
	e.c.SetBootDelays(BootDelays{FirstBoot: 3 * time.Minute, Starting: 20 * time.Second, Resume: 10 * time.Second})
	out, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := *out.Instances[0].InstanceId
	waitFor := func(want time.Duration) {
		t.Helper()
		from := e.clock.Now()
		done := make(chan error, 1)
		go func() { done <- e.c.WaitReady(ctx(t), id) }()
		for {
			eventually.True(t, 10*time.Second, "WaitReady waits on the clock or returns", func() bool { return e.clock.HasWaiters() || len(done) > 0 })
			if len(done) > 0 {
				break
			}
			e.clock.Step(5 * time.Second)
		}
		if err := <-done; err != nil {
			t.Fatalf("WaitReady = %v", err)
		}
		if got := e.clock.Since(from); got != want {
			t.Fatalf("Ready after %s; want %s", got, want)
		}
	}
	waitFor(4 * time.Minute)
	if _, err := e.client.StopInstances(ctx(t), &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.WaitReady(context.Background(), id); err == nil {
		t.Fatalf("WaitReady of a stopped instance = nil; want an error")
	}
	if _, err := e.client.StartInstances(ctx(t), &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	waitFor(30 * time.Second)
}
