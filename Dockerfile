# abcd CPU image: builds with the same script as the README, runs as uid 1000.
#   docker build -t abcd .
#   docker run --rm abcd generate --prompt "hello" --max-tokens 16
FROM debian:12 AS build
WORKDIR /src
COPY . .
RUN deploy/scripts/setup.sh build

FROM debian:12-slim
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libabsl20220623 libsentencepiece0 libopenblas0 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --create-home abcd
COPY --from=build /src/build/server/abcd-cli /usr/local/bin/abcd-cli
COPY --from=build /src/models/checkpoints /opt/abcd/models
ENV ABCD_MODEL=/opt/abcd/models/abc-lm-untrained
USER 1000
ENTRYPOINT ["abcd-cli"]
CMD ["info"]
