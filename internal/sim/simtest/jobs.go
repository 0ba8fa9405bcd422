package simtest

import (
	"errors"
	"io"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// CountJobs reads a job poll to its end: the jobs it brought, then how
// it ended (nil for io.EOF).
func CountJobs(stream pb.Gateway_ActivateJobsClient, err error) (int, error) {
	jobs, err := ReadJobs(stream, err)
	return len(jobs), err
}

// ReadJobs is CountJobs with the jobs themselves.
func ReadJobs(stream pb.Gateway_ActivateJobsClient, err error) ([]*pb.ActivatedJob, error) {
	if err != nil {
		return nil, err
	}
	var jobs []*pb.ActivatedJob
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return jobs, nil
		}
		if err != nil {
			return jobs, err
		}
		jobs = append(jobs, resp.GetJobs()...)
	}
}
