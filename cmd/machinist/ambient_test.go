//go:build !slim

package main

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/machinist-io/machinist/core/controller/manager"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// TestAWSAmbientCredentials: `machinist driver` refuses an AWS secret without keys even when the
// process's environment holds valid AWS keys, and uses them only with --aws-ambient-credentials.
func TestAWSAmbientCredentials(t *testing.T) {
	cloud := fakeaws.New(fakeaws.Options{})
	cloud.SeedDemo()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cloud.Serve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": fakeaws.DemoAccessKeyID, "AWS_SECRET_ACCESS_KEY": fakeaws.DemoSecretAccessKey,
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
		"AWS_PROFILE": "", "AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "", "MACHINIST_AWS_AMBIENT_CREDENTIALS": "",
	} {
		t.Setenv(k, v)
	}
	secret := writeFile(t, "secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: keyless\n  namespace: default\nstringData:\n  ec2Endpoint: "+srv.URL+"\n  userData: '#cloud-config'\n")
	flags := []string{"driver", "list", "--class", repoPath(t, "kubernetes/samples/fakecloud/aws-machineclass.yaml"), "--secret", secret}

	_, errText := run(t, flags...)
	for _, want := range []string{"InvalidArgument", "providerAccessKeyId", "workloadIdentityTokenFile", "--aws-ambient-credentials"} {
		if !strings.Contains(errText, want) {
			t.Errorf("list with a keyless secret: error %q does not name %s", errText, want)
		}
	}
	if n := len(cloud.Requests.All()); n != 0 {
		t.Fatalf("the refused secret made %d requests", n)
	}
	mustRun(t, append(flags, "--aws-ambient-credentials")...)
	if len(cloud.Requests.For("DescribeInstances")) == 0 {
		t.Fatal("--aws-ambient-credentials: no request reached EC2")
	}
}

// TestRunPassesAWSAmbientCredentials: run's flag (and its environment variable) reaches the
// compiled-in drivers' Env.
func TestRunPassesAWSAmbientCredentials(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want []string
	}{
		{nil, "", nil},
		{[]string{"--aws-ambient-credentials"}, "", []string{"aws"}},
		{nil, "true", []string{"aws"}},
	} {
		t.Setenv("MACHINIST_AWS_AMBIENT_CREDENTIALS", tc.env)
		cmd := runCommand()
		var got manager.Options
		cmd.Action = func(c *cli.Context) error {
			var err error
			got, err = runOptions(c, manager.AllInOne)
			return err
		}
		app := &cli.App{Name: "machinist", Commands: []*cli.Command{cmd}}
		if err := app.Run(append([]string{"machinist", "run"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.AmbientCredentials, tc.want) {
			t.Errorf("run %v (env %q): AmbientCredentials = %v, want %v", tc.args, tc.env, got.AmbientCredentials, tc.want)
		}
	}
}
