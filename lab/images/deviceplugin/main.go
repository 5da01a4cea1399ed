// The lab's device plugin (image gpusplit.lab/k8s-device-plugin-standin): a kubelet device plugin speaking the
// real device-plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1) to the real kubelet of the
// lab's node, for what gpusplit relies on of NVIDIA's plugin:
//
//   - it advertises only the GPUs its container was given: the GPU device nodes the NVIDIA runtime
//     made in its /dev (DEVICE_DIR; /dev/nvidia<minor>, character devices of major 195, which the
//     lab's nvidia-container-cli makes as the real one does), each GPU found by its minor number
//     in the GPU fixture (GPU_FIXTURE, the JSON the fake NVML reads) as NVML finds it, with its
//     UUID and NUMA node from there; never from the NVIDIA_VISIBLE_DEVICES of its own environment,
//     so a runtime that refuses the container's request leaves it without GPUs. With none it
//     registers nothing and waits, as NVIDIA's plugin does when it finds no device;
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
	"sort"
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

// nvidiaMajor: the character-device major of the NVIDIA driver's GPU nodes (/dev/nvidia<minor>)
const nvidiaMajor = 195

// exposed: the minor numbers of the GPU device nodes in dir (/dev/nvidia<minor>, major 195; not
// nvidiactl, whose minor is 255, nor nvidia-uvm), in minor order
func exposed(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, e := range entries {
		digits := strings.TrimPrefix(e.Name(), "nvidia")
		if digits == e.Name() || digits == "" || strings.Trim(digits, "0123456789") != "" {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(dir, e.Name()), &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			continue
		}
		major, minor := int64(st.Rdev>>8&0xfff), int64(st.Rdev&0xff|st.Rdev>>12&0xfff00)
		if major == nvidiaMajor && minor < 255 {
			out = append(out, minor)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

type gpu struct {
	uuid string
	numa int64
}

// fixtureGPUs: the fixture's GPUs by minor number
func fixtureGPUs(path string) (map[int64]gpu, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var fixture struct {
		GPUs []struct {
			UUID  string `json:"uuid"`
			Minor int64  `json:"minor_number"`
			NUMA  *int64 `json:"numa_node"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(data, &fixture); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[int64]gpu{}
	for _, g := range fixture.GPUs {
		n := int64(-1)
		if g.NUMA != nil {
			n = *g.NUMA
		}
		out[g.Minor] = gpu{uuid: g.UUID, numa: n}
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
	devDir := env("DEVICE_DIR", "/dev")
	minors, err := exposed(devDir)
	if err != nil {
		log.Fatalf("the GPU device nodes of this container (%s): %v", devDir, err)
	}
	gpus, err := fixtureGPUs(env("GPU_FIXTURE", "/etc/gpusplit-lab/gpus.json"))
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
	for _, minor := range minors {
		g, ok := gpus[minor]
		if !ok {
			log.Fatalf("%s/nvidia%d is not a GPU of the fixture", devDir, minor)
		}
		d := &pluginapi.Device{ID: g.uuid, Health: pluginapi.Healthy}
		if g.numa >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: g.numa}}}
		}
		p.devices = append(p.devices, d)
		p.known[g.uuid] = true
	}
	if len(p.devices) == 0 {
		// NVIDIA's plugin, finding no device, registers nothing and blocks (its "No devices found")
		log.Printf("no GPU device node in %s: the runtime exposed no GPU to this container; waiting indefinitely", devDir)
		select {}
	}
	log.Printf("the runtime exposed %d GPU(s) to this container: %v", len(p.devices), p.ids())
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
