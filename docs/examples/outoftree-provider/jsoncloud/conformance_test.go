package jsoncloud_test

import (
	"path/filepath"
	"testing"

	"github.com/machinist-io/machinist/core/drivertest"

	"example.com/machinist-provider-jsoncloud/jsoncloud"
	"example.com/machinist-provider-jsoncloud/jsoncloud/jsoncloudtest"
)

func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t testing.TB) drivertest.Target {
		cloud, err := jsoncloud.OpenCloud(filepath.Join(t.TempDir(), "cloud.json"), jsoncloudtest.Token)
		if err != nil {
			t.Fatal(err)
		}
		target := jsoncloudtest.Target(t, cloud)
		target.Driver = jsoncloud.New(cloud, nil)
		return target
	})
}
