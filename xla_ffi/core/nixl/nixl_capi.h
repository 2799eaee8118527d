// NIXL's C API, the part gearjax calls, loaded at run time. NIXL ships as a
// Python wheel (nixl-cu12) with libnixl_capi.so but no headers, and its C++ API
// is built with another compiler's ABI, so the C API (opaque handles, plain
// types) is the stable target; loading it with dlopen keeps gearjax building
// and importing where NIXL is absent. The declarations follow NIXL's
// src/bindings/rust/wrapper.h (ai-dynamo/nixl), checked against the symbols
// libnixl_capi.so 1.5.1 exports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gearjax::nixl {

// nixl_capi_status_t: 0 success, 1 in progress, negative an error.
inline constexpr int kSuccess = 0;
inline constexpr int kInProgress = 1;
inline constexpr int kDram = 0;   // nixl_capi_mem_type_t
inline constexpr int kRead = 0;   // nixl_capi_xfer_op_t

// nixl_capi_agent_config_t, field for field.
struct AgentConfig {
  bool enable_prog_thread;
  bool enable_listen_thread;
  int listen_port;
  int thread_sync;  // nixl_capi_thread_sync_t: 0 none (callers serialise)
  unsigned int num_workers;
  uint64_t pthr_delay_us;
  uint64_t lthr_delay_us;
  bool capture_telemetry;
};

using Handle = void*;  // every nixl_capi_*_t is a pointer to an opaque struct

// The functions, resolved once per process from the library.
struct Api {
  int (*create_configured_agent)(const char*, const AgentConfig*, Handle*);
  int (*destroy_agent)(Handle);
  int (*create_params)(Handle*);
  int (*destroy_params)(Handle);
  int (*create_backend)(Handle agent, const char* plugin, Handle params, Handle* backend);
  int (*destroy_backend)(Handle);
  int (*create_reg_dlist)(int mem_type, Handle*);
  int (*reg_dlist_add_desc)(Handle, uintptr_t addr, size_t len, uint64_t dev_id,
                            const void* metadata, size_t metadata_len);
  int (*destroy_reg_dlist)(Handle);
  int (*register_mem)(Handle agent, Handle dlist, Handle opt_args);
  int (*deregister_mem)(Handle agent, Handle dlist, Handle opt_args);
  int (*get_local_md)(Handle agent, void** data, size_t* len);     // data: malloc'd
  int (*load_remote_md)(Handle agent, const void* data, size_t len, char** name);  // strdup'd
  int (*invalidate_remote_md)(Handle agent, const char* name);
  int (*create_xfer_dlist)(int mem_type, Handle*);
  int (*xfer_dlist_add_desc)(Handle, uintptr_t addr, size_t len, uint64_t dev_id);
  int (*destroy_xfer_dlist)(Handle);
  int (*create_xfer_req)(Handle agent, int op, Handle local, Handle remote, const char* peer,
                         Handle* req, Handle opt_args);
  int (*post_xfer_req)(Handle agent, Handle req, Handle opt_args);
  int (*get_xfer_status)(Handle agent, Handle req);
  int (*release_xfer_req)(Handle agent, Handle req);
  int (*destroy_xfer_req)(Handle req);
  int (*gen_notif)(Handle agent, const char* peer, const void* data, size_t len,
                   Handle opt_args);
  int (*create_notif_map)(Handle*);
  int (*destroy_notif_map)(Handle);
  int (*get_notifs)(Handle agent, Handle map, Handle opt_args);
  int (*notif_map_size)(Handle map, size_t* size);
  int (*notif_map_get_agent_at)(Handle map, size_t index, const char** name);
  int (*notif_map_get_notifs_size)(Handle map, const char* name, size_t* size);
  int (*notif_map_get_notif)(Handle map, const char* name, size_t index, const void** data,
                             size_t* len);
  int (*notif_map_clear)(Handle map);
};

// The API in the library at `path` (the first path a process loads wins;
// another path later is refused). Throws std::runtime_error naming the
// library or the missing symbol.
const Api& LoadApi(const std::string& path);

}  // namespace gearjax::nixl
