// Command clientgo is bench_sync.py's client-go peer: the same jobs as bench_controller_child.py,
// done the way a client-go controller does them, printing one line of JSON.
//
//	clientgo JOB KUBECONFIG NAMESPACE COUNT
//
// JOB is "sync" (seconds from the program's start until a worker took each of COUNT ConfigMaps
// of NAMESPACE from a work queue fed by a shared informer, once; the worker does nothing else,
// like the Python children's reconcilers) or "configmaps" (cache NAMESPACE's ConfigMaps, then
// report RSS after a garbage collection). Workers start at once rather than after
// cache.WaitForCacheSync, whose 100 ms poll would be most of the figure: client-go at its best.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: clientgo sync|configmaps KUBECONFIG NAMESPACE COUNT")
		os.Exit(2)
	}
	job, kubeconfig, namespace := os.Args[1], os.Args[2], os.Args[3]
	count, err := strconv.Atoi(os.Args[4])
	check(err)
	started := time.Now()
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	check(err)
	clientset, err := kubernetes.NewForConfig(config)
	check(err)
	factory := informers.NewSharedInformerFactoryWithOptions(
		clientset, 0, informers.WithNamespace(namespace))
	configmaps := factory.Core().V1().ConfigMaps()
	informer := configmaps.Informer()
	stop := make(chan struct{})
	result := map[string]any{}
	switch job {
	case "sync":
		queue := workqueue.NewTypedRateLimitingQueue(
			workqueue.DefaultTypedControllerRateLimiter[string]())
		_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { enqueue(queue, obj) },
			UpdateFunc: func(_, obj any) { enqueue(queue, obj) },
			DeleteFunc: func(obj any) { enqueue(queue, obj) },
		})
		check(err)
		done := make(chan struct{})
		go work(queue, count, done)
		factory.Start(stop)
		<-done
		result["seconds"] = time.Since(started).Seconds()
		queue.ShutDown()
	case "configmaps":
		factory.Start(stop)
		if !cache.WaitForCacheSync(stop, informer.HasSynced) {
			check(fmt.Errorf("informer did not sync"))
		}
		items, err := configmaps.Lister().List(labels.Everything())
		check(err)
		runtime.GC()
		debug.FreeOSMemory()
		result["objects"] = len(items)
		result["rss_kib"] = rssKiB("VmRSS")
	default:
		check(fmt.Errorf("unknown job %q", job))
	}
	close(stop)
	result["peak_rss_kib"] = rssKiB("VmHWM")
	encoded, err := json.Marshal(result)
	check(err)
	fmt.Println(string(encoded))
}

// enqueue adds an object's namespace/name key, as controllers built on client-go do.
func enqueue(queue workqueue.TypedRateLimitingInterface[string], obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		queue.Add(key)
	}
}

// work takes keys until count distinct ones were handled, then closes done.
func work(queue workqueue.TypedRateLimitingInterface[string], count int, done chan struct{}) {
	seen := make(map[string]struct{}, count)
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		if _, ok := seen[key]; !ok {
			seen[key] = struct{}{}
			if len(seen) == count {
				close(done)
			}
		}
		queue.Forget(key)
		queue.Done(key)
	}
}

func rssKiB(field string) int {
	status, err := os.ReadFile("/proc/self/status")
	check(err)
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, field+":") {
			kib, err := strconv.Atoi(strings.Fields(line)[1])
			check(err)
			return kib
		}
	}
	check(fmt.Errorf("%s not in /proc/self/status", field))
	return 0
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientgo:", err)
		os.Exit(1)
	}
}
