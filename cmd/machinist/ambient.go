package main

import "github.com/urfave/cli/v2"

// awsAmbientFlag lets the AWS driver act with the process's own AWS identity (the SDK's default
// chain) when a class's secret holds no credentials. Off by default: inside a seed on AWS that
// identity is the seed node's role, and a class with a broken secret must not act with it.
func awsAmbientFlag(category string) cli.Flag {
	return &cli.BoolFlag{
		Category: category, Name: "aws-ambient-credentials", EnvVars: []string{"MACHINIST_AWS_AMBIENT_CREDENTIALS"},
		Usage: "let the compiled-in AWS driver use this process's own AWS identity (environment, shared files, IRSA/EKS Pod Identity, the instance metadata service) for classes whose secret holds no credentials; " +
			"without it such a secret is refused, as Gardener's provider refuses it",
	}
}

// ambientCredentials is registry.Env.AmbientCredentials as the flags above ask for it.
func ambientCredentials(c *cli.Context) []string {
	if c.Bool("aws-ambient-credentials") {
		return []string{"aws"}
	}
	return nil
}
