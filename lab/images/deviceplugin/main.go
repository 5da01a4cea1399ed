// The lab's device plugin (image gpusplit.lab/device-plugin): a kubelet device plugin speaking the
// real device-plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1) to the real kubelet of the
// lab's node, for what gpusplit relies on of NVIDIA's plugin:
//
//   - it advertises only the GPUs its container was given: the UUIDs listed, one a line, in the
//     file EXPOSED_DEVICES_FILE (what the runtime exposed in the container), never the
//     NVIDIA_VISIBLE_DEVICES of its own environment; each with its NUMA node from the GPU fixture
//     (GPU_FIXTURE, the JSON the fake NVML reads);
//   - it registers RESOURCE_NAME (default nvidia.com/gpu) with the kubelet, serves ListAndWatch,
//     GetDevicePluginOptions, Allocate and health, and registers again when the kubelet restarts
//     (its socket is made anew);
//   - Allocate answers with DEVICE_LIST_STRATEGY envvar (NVIDIA_VISIBLE_DEVICES=<uuids>) or
//     volume-mounts (/dev/null mounted at /var/run/nvidia-container-devices/<uuid> and
//     NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices), as NVIDIA's plugin names them.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const volumeMountsDir = "/var/run/nvidia-container-devices"

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	strategy string
	devices  []*pluginapi.Device
	known    map[string]bool
	stop     chan struct{}
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// exposed: the GPU UUIDs the runtime exposed in this container
func exposed(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out, nil
}

// numaOf: the NUMA node of each GPU UUID of the fixture
func numaOf(path string) (map[string]int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var fixture struct {
		GPUs []struct {
			UUID string `json:"uuid"`
			NUMA *int64 `json:"numa_node"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(data, &fixture); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]int64{}
	for _, g := range fixture.GPUs {
		if g.NUMA != nil {
			out[g.UUID] = *g.NUMA
		} else {
			out[g.UUID] = -1
		}
	}
	return out, nil
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-p.stop
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		for _, id := range c.DevicesIds {
			if !p.known[id] {
				return nil, fmt.Errorf("unknown device %q: this plugin advertises %d device(s)", id, len(p.devices))
			}
		}
		r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		switch p.strategy {
		case "volume-mounts":
			r.Envs["NVIDIA_VISIBLE_DEVICES"] = volumeMountsDir
			for _, id := range c.DevicesIds {
				r.Mounts = append(r.Mounts, &pluginapi.Mount{
					ContainerPath: filepath.Join(volumeMountsDir, id), HostPath: "/dev/null", ReadOnly: true,
				})
			}
		default:
			r.Envs["NVIDIA_VISIBLE_DEVICES"] = strings.Join(c.DevicesIds, ",")
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
		log.Printf("allocate %v (%s)", c.DevicesIds, p.strategy)
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve: listen on our socket in the kubelet's device-plugin dir, then register with the kubelet
func (p *plugin) serve(dir, name string) (*grpc.Server, error) {
	sock := filepath.Join(dir, name)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: name, ResourceName: p.resource, Options: &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("register with the kubelet: %w", err)
	}
	log.Printf("registered %s with the kubelet: %d device(s) %v", p.resource, len(p.devices), p.ids())
	return srv, nil
}

func (p *plugin) ids() []string {
	var out []string
	for _, d := range p.devices {
		out = append(out, d.ID)
	}
	return out
}

func inode(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("gpusplit-lab-device-plugin: ")
	dir := env("DEVICE_PLUGIN_DIR", pluginapi.DevicePluginPath)
	uuids, err := exposed(env("EXPOSED_DEVICES_FILE", "/run/nvidia-container-devices"))
	if err != nil {
		log.Fatalf("what the runtime exposed in this container: %v", err)
	}
	numa, err := numaOf(env("GPU_FIXTURE", "/etc/gpusplit-lab/gpus.json"))
	if err != nil {
		log.Fatalf("the GPU fixture: %v", err)
	}
	p := &plugin{
		resource: env("RESOURCE_NAME", "nvidia.com/gpu"),
		strategy: env("DEVICE_LIST_STRATEGY", "envvar"),
		known:    map[string]bool{},
	}
	if p.strategy != "envvar" && p.strategy != "volume-mounts" {
		log.Fatalf("DEVICE_LIST_STRATEGY %q: envvar or volume-mounts", p.strategy)
	}
	for _, id := range uuids {
		n, ok := numa[id]
		if !ok {
			log.Fatalf("exposed device %s is not a GPU of the fixture", id)
		}
		d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
		if n >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: n}}}
		}
		p.devices = append(p.devices, d)
		p.known[id] = true
	}
	name := "gpusplit-lab-" + strings.NewReplacer("/", "-", ".", "-").Replace(p.resource) + ".sock"
	for {
		p.stop = make(chan struct{})
		srv, err := p.serve(dir, name)
		if err != nil {
			log.Printf("%v; again in 2 s", err)
			time.Sleep(2 * time.Second)
			continue
		}
		// the kubelet makes its socket anew when it restarts: then register again
		seen := inode(filepath.Join(dir, "kubelet.sock"))
		for inode(filepath.Join(dir, "kubelet.sock")) == seen && inode(filepath.Join(dir, name)) != 0 {
			time.Sleep(time.Second)
		}
		log.Printf("the kubelet restarted or our socket is gone: registering again")
		close(p.stop)
		srv.Stop()
	}
}
