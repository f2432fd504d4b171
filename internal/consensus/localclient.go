package consensus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/auth"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The node's own client, with etcd authentication on (auth.go).
//
// etcd's in-process client (v3client) hands each request's context to
// the server as it is, so with authentication on the server finds no user
// in it and refuses everything. etcd's own root token (AuthStore.WithRoot)
// would do, but a simple token made per request is kept for its TTL,
// five minutes of tokens at a thousand puts a second, and one kept would
// expire. So the client here is v3client's, with each server wrapped to
// put in the request's context what a TLS connection would: a verified
// client certificate whose common name is the node's etcd user (etcd
// takes the user from the CN once it requires client certificates, at
// the revision of each request). Nothing crosses a socket: no listener
// is there for another process to present itself.

// nodeUser is the etcd user the node's own requests are made as: root, as
// the node must add and remove members, which etcd lets root alone do.
const nodeUser = "root"

// as puts in a request's context the identity of its user, and lets the
// request in through g: identity says what a TLS connection would have
// verified, for the node's own client a fixed user (asUser), for the JSON
// API the caller's (jsonapi.go).
type as struct {
	identity func(context.Context) credentials.TLSInfo
	g        *gate
}

func asUser(name string, g *gate) as {
	info := credentials.TLSInfo{State: tls.ConnectionState{
		VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: name}}}},
	}}
	return as{identity: func(context.Context) credentials.TLSInfo { return info }, g: g}
}

func (a as) ctx(ctx context.Context) context.Context {
	ctx = peer.NewContext(ctx, &peer.Peer{AuthInfo: a.identity(ctx)})
	if _, ok := metadata.FromIncomingContext(ctx); !ok {
		ctx = metadata.NewIncomingContext(ctx, metadata.MD{})
	}
	return ctx
}

// stream serves st through the gate, as the client's user. Its header
// goes first, empty, as gRPC's transport would send it: the JSON API's
// gateway waits for it before it answers, and etcd's servers send none.
func (a as) stream(st grpc.ServerStream, serve func(context.Context) error) error {
	ctx, leave, err := a.g.enter(st.Context())
	if err != nil {
		return err
	}
	defer leave()
	if err := st.SendHeader(nil); err != nil {
		return err
	}
	return serve(a.ctx(ctx))
}

// fresh serves a request through the gate, as the client's user, and
// retries op while etcd refuses it because its authentication store
// changed under it (a user or role added, authentication turned on): a
// request takes the store's revision when it starts, and etcd refuses it,
// unapplied, if the store moved on before it ended. The next attempt takes
// the new revision. A client of etcd's over TLS retries too; without this,
// the owner adding a user could fail any request of the node's, the watch
// of its CRL among them.
func fresh[T any](a as, ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	ctx, leave, err := a.g.enter(ctx)
	if err != nil {
		var none T
		return none, err
	}
	defer leave()
	ctx = a.ctx(ctx)
	for attempt := 1; ; attempt++ {
		r, err := op(ctx)
		if attempt < freshAttempts && errors.Is(rpctypes.Error(err), rpctypes.ErrAuthOldRevision) {
			continue
		}
		return r, err
	}
}

// freshAttempts bounds fresh: the store changes once per request of the
// owner's, far less often than the node asks.
const freshAttempts = 10

// services are etcd's gRPC services of a member, called in process as a
// says: by the node's own client (localClient), the JSON API
// (jsonapi.go) and the space keeper (space.go).
type services struct {
	kv          pb.KVClient
	watch       pb.WatchClient
	lease       pb.LeaseClient
	cluster     pb.ClusterClient
	maintenance pb.MaintenanceClient
	auth        pb.AuthClient
}

// servicesAs are s's services, called as a.
func servicesAs(s *etcdserver.EtcdServer, a as) services {
	return services{
		kv:          adapter.KvServerToKvClient(kvAs{v3rpc.NewQuotaKVServer(s), a}),
		watch:       adapter.WatchServerToWatchClient(watchAs{v3rpc.NewWatchServer(s), a}),
		lease:       adapter.LeaseServerToLeaseClient(leaseAs{v3rpc.NewQuotaLeaseServer(s), a}),
		cluster:     adapter.ClusterServerToClusterClient(clusterAs{v3rpc.NewClusterServer(s), a}),
		maintenance: adapter.MaintenanceServerToMaintenanceClient(maintenanceAs{v3rpc.NewMaintenanceServer(s, nil), a, s}),
		auth:        adapter.AuthServerToAuthClient(authAs{v3rpc.NewAuthServer(s), a}),
	}
}

// localClient is a client of s in this process whose requests are made
// as user.
func localClient(s *etcdserver.EtcdServer, user string, g *gate) *clientv3.Client {
	sv := servicesAs(s, asUser(user, g))
	c := clientv3.NewCtxClient(context.Background(), clientv3.WithZapLogger(s.Logger()))
	c.KV = clientv3.NewKVFromKVClient(sv.kv, c)
	c.Lease = clientv3.NewLeaseFromLeaseClient(sv.lease, c, time.Second)
	c.Watcher = blankWatcher{clientv3.NewWatchFromWatchClient(sv.watch, c)}
	c.Maintenance = clientv3.NewMaintenanceFromMaintenanceClient(sv.maintenance, c)
	c.Cluster = clientv3.NewClusterFromClusterClient(sv.cluster, c)
	c.Auth = clientv3.NewAuthFromAuthClient(sv.auth, c)
	return c
}

// blankWatcher watches with a context whose string is fixed: the watcher
// names its streams by their context's string, which would read the
// values in it while others write them (as v3client does).
type blankWatcher struct{ clientv3.Watcher }

func (w blankWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	return w.Watcher.Watch(blankContext{ctx}, key, opts...)
}

type blankContext struct{ context.Context }

func (blankContext) String() string { return "(blank)" }

// bidiAs and streamAs are streams whose context carries an identity.
type bidiAs[Req, Resp any] struct {
	grpc.BidiStreamingServer[Req, Resp]
	ctx context.Context
}

func (s bidiAs[Req, Resp]) Context() context.Context { return s.ctx }

// Recv says io.EOF when the client has closed its side of the stream,
// as gRPC's transport does: etcd's in-process pipe says Canceled, and
// etcd's servers end the stream on it, with its answers still to come
// (a JSON watch sends its request, closes its side, and reads on).
func (s bidiAs[Req, Resp]) Recv() (*Req, error) {
	r, err := s.BidiStreamingServer.Recv()
	if status.Code(err) == codes.Canceled && s.ctx.Err() == nil {
		return nil, io.EOF
	}
	return r, err
}

type streamAs[Resp any] struct {
	grpc.ServerStreamingServer[Resp]
	ctx context.Context
}

func (s streamAs[Resp]) Context() context.Context { return s.ctx }

type kvAs struct {
	pb.KVServer
	as
}

func (s kvAs) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.RangeResponse, error) { return s.KVServer.Range(ctx, r) })
}

func (s kvAs) RangeStream(r *pb.RangeRequest, st grpc.ServerStreamingServer[pb.RangeStreamResponse]) error {
	return s.stream(st, func(ctx context.Context) error {
		return s.KVServer.RangeStream(r, streamAs[pb.RangeStreamResponse]{st, ctx})
	})
}

func (s kvAs) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.PutResponse, error) { return s.KVServer.Put(ctx, r) })
}

func (s kvAs) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.DeleteRangeResponse, error) { return s.KVServer.DeleteRange(ctx, r) })
}

func (s kvAs) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.TxnResponse, error) { return s.KVServer.Txn(ctx, r) })
}

func (s kvAs) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.CompactionResponse, error) { return s.KVServer.Compact(ctx, r) })
}

type watchAs struct {
	pb.WatchServer
	as
}

func (s watchAs) Watch(st grpc.BidiStreamingServer[pb.WatchRequest, pb.WatchResponse]) error {
	return s.stream(st, func(ctx context.Context) error {
		return s.WatchServer.Watch(bidiAs[pb.WatchRequest, pb.WatchResponse]{st, ctx})
	})
}

type leaseAs struct {
	pb.LeaseServer
	as
}

func (s leaseAs) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.LeaseGrantResponse, error) { return s.LeaseServer.LeaseGrant(ctx, r) })
}

func (s leaseAs) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.LeaseRevokeResponse, error) { return s.LeaseServer.LeaseRevoke(ctx, r) })
}

func (s leaseAs) LeaseKeepAlive(st grpc.BidiStreamingServer[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse]) error {
	return s.stream(st, func(ctx context.Context) error {
		return s.LeaseServer.LeaseKeepAlive(bidiAs[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse]{st, ctx})
	})
}

func (s leaseAs) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.LeaseTimeToLiveResponse, error) {
		return s.LeaseServer.LeaseTimeToLive(ctx, r)
	})
}

func (s leaseAs) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.LeaseLeasesResponse, error) { return s.LeaseServer.LeaseLeases(ctx, r) })
}

type clusterAs struct {
	pb.ClusterServer
	as
}

func (s clusterAs) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.MemberAddResponse, error) { return s.ClusterServer.MemberAdd(ctx, r) })
}

func (s clusterAs) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.MemberRemoveResponse, error) {
		return s.ClusterServer.MemberRemove(ctx, r)
	})
}

func (s clusterAs) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.MemberUpdateResponse, error) {
		return s.ClusterServer.MemberUpdate(ctx, r)
	})
}

func (s clusterAs) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.MemberListResponse, error) { return s.ClusterServer.MemberList(ctx, r) })
}

func (s clusterAs) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.MemberPromoteResponse, error) {
		return s.ClusterServer.MemberPromote(ctx, r)
	})
}

type maintenanceAs struct {
	pb.MaintenanceServer
	as
	etcd *etcdserver.EtcdServer
}

func (s maintenanceAs) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AlarmResponse, error) { return s.MaintenanceServer.Alarm(ctx, r) })
}

// Status is etcd's, but for a member removed while etcd answers, which
// is an error rather than a panic (survivingRemoval).
func (s maintenanceAs) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	present := func() bool { return s.etcd.Cluster().Member(s.etcd.MemberID()) != nil }
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.StatusResponse, error) {
		return survivingRemoval(present, func() (*pb.StatusResponse, error) { return s.MaintenanceServer.Status(ctx, r) })
	})
}

// Defragment defragments the member's database if the caller is an
// administrator, as etcd's maintenance server does; but not through it:
// it tells etcd's gRPC health service of each defragmentation, and one
// made in process has none (etcd's type for it is unexported, and a nil
// one panics).
func (s maintenanceAs) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.DefragmentResponse, error) {
		ai, err := s.etcd.AuthInfoFromCtx(ctx)
		if err != nil {
			return nil, rpctypes.ErrGRPCPermissionDenied
		}
		if err := s.etcd.AuthStore().IsAdminPermitted(ai); err != nil {
			if errors.Is(err, auth.ErrUserEmpty) {
				return nil, rpctypes.ErrGRPCUserEmpty
			}
			return nil, rpctypes.ErrGRPCPermissionDenied
		}
		if err := s.etcd.Defragment(); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return &pb.DefragmentResponse{}, nil
	})
}

func (s maintenanceAs) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.HashResponse, error) { return s.MaintenanceServer.Hash(ctx, r) })
}

func (s maintenanceAs) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.HashKVResponse, error) { return s.MaintenanceServer.HashKV(ctx, r) })
}

func (s maintenanceAs) Snapshot(r *pb.SnapshotRequest, st grpc.ServerStreamingServer[pb.SnapshotResponse]) error {
	return s.stream(st, func(ctx context.Context) error {
		return s.MaintenanceServer.Snapshot(r, streamAs[pb.SnapshotResponse]{st, ctx})
	})
}

func (s maintenanceAs) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.MoveLeaderResponse, error) {
		return s.MaintenanceServer.MoveLeader(ctx, r)
	})
}

func (s maintenanceAs) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.DowngradeResponse, error) { return s.MaintenanceServer.Downgrade(ctx, r) })
}

type authAs struct {
	pb.AuthServer
	as
}

func (s authAs) AuthEnable(ctx context.Context, r *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthEnableResponse, error) { return s.AuthServer.AuthEnable(ctx, r) })
}

func (s authAs) AuthDisable(ctx context.Context, r *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthDisableResponse, error) { return s.AuthServer.AuthDisable(ctx, r) })
}

func (s authAs) AuthStatus(ctx context.Context, r *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthStatusResponse, error) { return s.AuthServer.AuthStatus(ctx, r) })
}

func (s authAs) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthUserAddResponse, error) { return s.AuthServer.UserAdd(ctx, r) })
}

func (s authAs) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthUserGetResponse, error) { return s.AuthServer.UserGet(ctx, r) })
}

func (s authAs) UserList(ctx context.Context, r *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthUserListResponse, error) { return s.AuthServer.UserList(ctx, r) })
}

func (s authAs) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthUserDeleteResponse, error) { return s.AuthServer.UserDelete(ctx, r) })
}

func (s authAs) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthUserChangePasswordResponse, error) {
		return s.AuthServer.UserChangePassword(ctx, r)
	})
}

func (s authAs) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthUserGrantRoleResponse, error) {
		return s.AuthServer.UserGrantRole(ctx, r)
	})
}

func (s authAs) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthUserRevokeRoleResponse, error) {
		return s.AuthServer.UserRevokeRole(ctx, r)
	})
}

func (s authAs) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthRoleAddResponse, error) { return s.AuthServer.RoleAdd(ctx, r) })
}

func (s authAs) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthRoleGetResponse, error) { return s.AuthServer.RoleGet(ctx, r) })
}

func (s authAs) RoleList(ctx context.Context, r *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthRoleListResponse, error) { return s.AuthServer.RoleList(ctx, r) })
}

func (s authAs) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthRoleDeleteResponse, error) { return s.AuthServer.RoleDelete(ctx, r) })
}

func (s authAs) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthRoleGrantPermissionResponse, error) {
		return s.AuthServer.RoleGrantPermission(ctx, r)
	})
}

func (s authAs) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	return fresh(s.as, ctx, func(ctx context.Context) (*pb.AuthRoleRevokePermissionResponse, error) {
		return s.AuthServer.RoleRevokePermission(ctx, r)
	})
}
