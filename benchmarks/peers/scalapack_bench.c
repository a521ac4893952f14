/* ScaLAPACK's PDPOTRF, PDGETRF + PDGETRS and PDGELS on a random matrix, timing only the routines.

   mpirun -n P scalapack_bench ROUTINE M N NB PR PC [WARMUP]

   ROUTINE: potrf (Cholesky of an N x N symmetric positive definite matrix), getrf (LU of an N x N matrix
   with partial pivoting, then PDGETRS of one right-hand side), gels (least squares of an M x N matrix
   and one right-hand side, QR by PDGEQRF inside). M is read for gels only. The matrix is NB x NB
   block-cyclic over a PR x PC grid (row-major BLACS grid, first block on process (0, 0)), the layout
   hpcgpu.linalg factors on. Every element is a hash of its global indices, so the matrix is the same
   whatever the grid. WARMUP untimed calls (default 1) run first, each on a fresh copy; the timed call
   runs from a barrier, and its time is the slowest rank's (MPI_Wtime, seconds). Rank 0 prints one JSON
   line. The exit status is 1 when the routine reports INFO != 0.

   Built by build_scalapack.sh beside this file. */

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void Cblacs_pinfo(int *mypnum, int *nprocs);
void Cblacs_get(int context, int what, int *val);
void Cblacs_gridinit(int *context, const char *order, int nprow, int npcol);
void Cblacs_gridinfo(int context, int *nprow, int *npcol, int *myrow, int *mycol);
void Cblacs_gridexit(int context);
int numroc_(const int *n, const int *nb, const int *iproc, const int *isrcproc, const int *nprocs);
void descinit_(int *desc, const int *m, const int *n, const int *mb, const int *nb, const int *irsrc,
               const int *icsrc, const int *ictxt, const int *lld, int *info);
void pdpotrf_(const char *uplo, const int *n, double *a, const int *ia, const int *ja, const int *desca,
              int *info);
void pdgetrf_(const int *m, const int *n, double *a, const int *ia, const int *ja, const int *desca, int *ipiv,
              int *info);
void pdgetrs_(const char *trans, const int *n, const int *nrhs, const double *a, const int *ia, const int *ja,
              const int *desca, const int *ipiv, double *b, const int *ib, const int *jb, const int *descb,
              int *info);
void pdgels_(const char *trans, const int *m, const int *n, const int *nrhs, double *a, const int *ia,
             const int *ja, const int *desca, double *b, const int *ib, const int *jb, const int *descb,
             double *work, const int *lwork, int *info);

/* A number in [0, 1) from a global index pair: splitmix64 of the pair. */
static double hash01(uint64_t i, uint64_t j, uint64_t salt) {
    uint64_t z = i * 0x9E3779B97F4A7C15ULL ^ (j + 0x632BE59BD9B4E019ULL) * 0xBF58476D1CE4E5B9ULL ^ salt;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

/* The global index of local index l (rows or columns) on process p of np, blocks of nb. */
static long global_of(long l, int nb, int p, int np) { return ((l / nb) * np + p) * nb + l % nb; }

/* Fill the local part (column-major, leading dimension lld) of the kind of matrix the routine needs. */
static void fill(double *a, int lr, int lc, int lld, int nb, int myrow, int mycol, int pr, int pc,
                 const char *routine, int n, uint64_t salt) {
    for (int lj = 0; lj < lc; lj++) {
        long j = global_of(lj, nb, mycol, pc);
        for (int li = 0; li < lr; li++) {
            long i = global_of(li, nb, myrow, pr);
            double v;
            if (strcmp(routine, "potrf") == 0)  /* symmetric, diagonally dominant: positive definite */
                v = hash01(i < j ? i : j, i < j ? j : i, salt) + (i == j ? (double)n : 0.0);
            else
                v = hash01(i, j, salt) - 0.5;
            a[li + (long)lj * lld] = v;
        }
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc < 7) {
        if (me == 0) fprintf(stderr, "usage: scalapack_bench potrf|getrf|gels M N NB PR PC [WARMUP]\n");
        MPI_Finalize();
        return 2;
    }
    const char *routine = argv[1];
    int m = atoi(argv[2]), n = atoi(argv[3]), nb = atoi(argv[4]), pr = atoi(argv[5]), pc = atoi(argv[6]);
    int warmup = argc > 7 ? atoi(argv[7]) : 1;
    if (strcmp(routine, "gels") != 0) m = n;
    if (pr * pc != np || nb < 1 || m < 1 || n < 1 || (strcmp(routine, "potrf") && strcmp(routine, "getrf")
                                                      && strcmp(routine, "gels"))) {
        if (me == 0) fprintf(stderr, "scalapack_bench: bad arguments (grid %dx%d on %d ranks)\n", pr, pc, np);
        MPI_Finalize();
        return 2;
    }
    int ctxt, myrow, mycol, zero = 0, one = 1, info = 0;
    Cblacs_get(-1, 0, &ctxt);
    Cblacs_gridinit(&ctxt, "Row", pr, pc);
    Cblacs_gridinfo(ctxt, &pr, &pc, &myrow, &mycol);
    int lr = numroc_(&m, &nb, &myrow, &zero, &pr), lc = numroc_(&n, &nb, &mycol, &zero, &pc);
    int lld = lr > 1 ? lr : 1;
    int lcb = numroc_(&one, &nb, &mycol, &zero, &pc);
    int desca[9], descb[9];
    descinit_(desca, &m, &n, &nb, &nb, &zero, &zero, &ctxt, &lld, &info);
    descinit_(descb, &m, &one, &nb, &nb, &zero, &zero, &ctxt, &lld, &info);
    double *a = malloc(sizeof(double) * (size_t)lld * (lc > 0 ? lc : 1));
    double *b = malloc(sizeof(double) * (size_t)lld);
    int *ipiv = malloc(sizeof(int) * (size_t)(lr + nb));
    double *work = NULL;
    int lwork = -1;
    if (strcmp(routine, "gels") == 0) {  /* workspace query */
        double q;
        pdgels_("N", &m, &n, &one, a, &one, &one, desca, b, &one, &one, descb, &q, &lwork, &info);
        lwork = (int)q + 1;
        work = malloc(sizeof(double) * (size_t)lwork);
    }
    double t = 0.0, t_solve = 0.0;
    for (int rep = 0; rep <= warmup; rep++) {
        fill(a, lr, lc, lld, nb, myrow, mycol, pr, pc, routine, n, 1);
        if (lcb > 0)
            for (int li = 0; li < lr; li++) b[li] = hash01(global_of(li, nb, myrow, pr), 0, 2) - 0.5;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (strcmp(routine, "potrf") == 0) {
            pdpotrf_("L", &n, a, &one, &one, desca, &info);
        } else if (strcmp(routine, "getrf") == 0) {
            pdgetrf_(&n, &n, a, &one, &one, desca, ipiv, &info);
            double t1 = MPI_Wtime();
            if (info == 0) pdgetrs_("N", &n, &one, a, &one, &one, desca, ipiv, b, &one, &one, descb, &info);
            t_solve = MPI_Wtime() - t1;
        } else {
            pdgels_("N", &m, &n, &one, a, &one, &one, desca, b, &one, &one, descb, work, &lwork, &info);
        }
        t = MPI_Wtime() - t0;
    }
    double times[2] = {t, t_solve}, slowest[2];
    MPI_Allreduce(times, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int bad = info != 0, anybad;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (me == 0)
        printf("{\"peer\": \"scalapack\", \"routine\": \"%s\", \"m\": %d, \"n\": %d, \"nb\": %d, \"grid\": [%d, %d], "
               "\"ranks\": %d, \"seconds\": %.6f, \"solve_seconds\": %.6f, \"info\": %d}\n",
               routine, m, n, nb, pr, pc, np, slowest[0], slowest[1], anybad ? (info ? info : -1) : 0);
    free(a);
    free(b);
    free(ipiv);
    free(work);
    Cblacs_gridexit(ctxt);
    MPI_Finalize();
    return anybad ? 1 : 0;
}
